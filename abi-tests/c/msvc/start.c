/*
 * The C consumer on x86_64 Windows with the MSVC ABI. The MSVC C runtime
 * (its start-up code, vcruntime.lib) and the Windows SDK are not packaged
 * for Debian, so the program is linked by lld-link without them: this entry
 * point stands in for the CRT's mainCRTStartup, and the import libraries
 * for kernel32.dll and vcruntime140.dll come from the .def files here.
 * Output goes to the console through WriteFile.
 */
#include <stdint.h>

#include "freestanding.h"

typedef void *handle_t;
__declspec(dllimport) handle_t GetStdHandle(uint32_t which);
__declspec(dllimport) int WriteFile(handle_t file, const void *data, uint32_t len,
                                    uint32_t *written, void *overlapped);
__declspec(dllimport) __declspec(noreturn) void ExitProcess(uint32_t code);

#define STD_OUTPUT_HANDLE ((uint32_t)-11)

void hostcopy_platform_write(const char *text) {
    uint32_t len = 0, written = 0;
    while (text[len])
        len++;
    WriteFile(GetStdHandle(STD_OUTPUT_HANDLE), text, len, &written, 0);
}

void hostcopy_msvc_start(void);
void hostcopy_msvc_start(void) { ExitProcess((uint32_t)hostcopy_freestanding_main()); }
