/*
 * bcryptprimitives.dll for wine 8, which lacks it: Rust's std on Windows
 * imports ProcessPrng from it to seed its hash maps, so no Rust test binary
 * starts without it. Built and put on WINEPATH by wine-runner.sh; forwards to
 * RtlGenRandom (advapi32's SystemFunction036), which wine has.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
