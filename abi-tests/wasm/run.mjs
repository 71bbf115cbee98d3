// Runs hostcopy's wasm32 modules under node: `node run.mjs FILE.wasm`.
//
// - The C consumer (abi-tests/c/wasm.c, linked against the static library)
//   exports hostcopy_consumer_main: run it, with its output on stdout.
// - The library itself (the shared library built for wasm32) exports
//   hostcopy_fn and its memory: run the contract cases on records written
//   into its linear memory, as a host embedding the module would.
// Exits 0 when everything passed. `node run.mjs --exports FILE.wasm` lists
// the module's exports instead, one a line.
import { readFileSync } from "node:fs";

if (process.argv[2] === "--exports") {
  const module = new WebAssembly.Module(readFileSync(process.argv[3]));
  for (const { name } of WebAssembly.Module.exports(module)) console.log(name);
  process.exit(0);
}
const bytes = readFileSync(process.argv[2]);
let memory;
const imports = {
  env: {
    hostcopy_write: (ptr, len) =>
      process.stdout.write(Buffer.from(memory.buffer, ptr, len).toString()),
  },
};
const { instance } = await WebAssembly.instantiate(bytes, imports);
const exports = instance.exports;
memory = exports.memory;

if (exports.hostcopy_consumer_main) {
  process.exit(exports.hostcopy_consumer_main());
}

const { hostcopy_fn, hostcopy_rejected } = exports;
let failures = 0;
let passed = 0;
function check(name, condition) {
  if (condition) {
    passed++;
  } else {
    failures++;
    console.log(`FAILED: ${name}`);
  }
}

// Scratch space of our own: new pages past everything the module uses.
const base = memory.grow(4) * 65536;
const view = () => new DataView(memory.buffer);
const u8 = () => new Uint8Array(memory.buffer);
const RECORD = base;
const SRC = base + 64;
const DST = base + 64 + 8192;
const GUARD = 32;
const pattern = (i) => (i * 7 + Math.floor(i / 251)) & 0xff;
function writeRecord(at, dst, src, nbytes) {
  view().setUint32(at, dst, true);
  view().setUint32(at + 4, src, true);
  view().setUint32(at + 8, nbytes, true);
}
function fill(at, len, byte) {
  u8().fill(byte, at, at + len);
}
function matches(at, len, first) {
  const m = u8();
  for (let i = 0; i < len; i++) if (m[at + i] !== pattern(first + i)) return false;
  return true;
}
function untouched(at, len) {
  return u8().subarray(at, at + len).every((b) => b === 0xa5);
}

for (let i = 0; i < 4096 + 64; i++) u8()[SRC + i] = pattern(i);
const rejectedBefore = hostcopy_rejected();

// Every length to 300 and a few larger ones, at mixed alignments, with guards.
for (let len = 0; len <= 4096; len += len < 300 ? 1 : 509) {
  const shift = len % 8;
  fill(DST, GUARD + len + GUARD, 0xa5);
  writeRecord(RECORD, DST + GUARD, SRC + shift, len);
  hostcopy_fn(RECORD);
  check(`copy of ${len} bytes`, matches(DST + GUARD, len, shift));
  check(`guards around ${len} bytes`, untouched(DST, GUARD) && untouched(DST + GUARD + len, GUARD));
}
check("valid records are not rejected", hostcopy_rejected() === rejectedBefore);

// A record at an odd address.
fill(DST, 200, 0xa5);
writeRecord(RECORD + 3, DST + GUARD, SRC, 100);
hostcopy_fn(RECORD + 3);
check("record at an odd address", matches(DST + GUARD, 100, 0));

// Zero bytes with null ends: nothing happens, nothing is rejected.
writeRecord(RECORD, 0, 0, 0);
hostcopy_fn(RECORD);
check("zero bytes are not rejected", hostcopy_rejected() === rejectedBefore);

// Null user_data, null ends and wrapping ranges: rejected, counted, nothing touched.
fill(DST, 256, 0xa5);
hostcopy_fn(0);
for (const [dst, src] of [
  [0, SRC],
  [DST + GUARD, 0],
  [0xffffffff - 4, SRC],
  [DST + GUARD, 0xffffffff - 4],
]) {
  writeRecord(RECORD, dst, src, 16);
  hostcopy_fn(RECORD);
}
check("five rejections counted", hostcopy_rejected() - rejectedBefore === 5);
check("rejected records touch nothing", untouched(DST, 256));

// Overlap in both directions: memmove.
for (const [to, from, first] of [
  [3, 0, 0],
  [0, 3, 3],
]) {
  for (let i = 0; i < 1000; i++) u8()[DST + i] = pattern(i);
  writeRecord(RECORD, DST + to, DST + from, 900);
  hostcopy_fn(RECORD);
  check(`overlapping copy (dst +${to}, src +${from})`, matches(DST + to, 900, first));
}

console.log(`${passed} passed, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
