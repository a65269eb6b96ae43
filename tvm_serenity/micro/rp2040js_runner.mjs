// Runs a bare-metal RP2040 image in rp2040js (the npm package pinned by the repository's
// package.json) and prints one JSON object on stdout. Driven by tvm_serenity/micro/runners.py.
//
//   node rp2040js_runner.mjs '<json>'   with
//   {"rp2040js": "<dir of the npm package>",
//    "segments": [{"address": int, "file": "<raw bytes>"}],  flash (0x10000000) or SRAM
//    "vtor": int | null,    boot like a flash image: VTOR = vtor, core.reset() loads SP/PC
//    "entry": int | null,   boot like the bootrom enters a RAM-only UF2: PC = entry
//    "timeout_s": number, "max_cycles": int | null}
//
// The emulator has no bootrom or boot2 (its bootrom is zero-filled), so the image is written
// directly into mcu.flash / mcu.sram after the RP2040 constructor's reset (which fills flash
// with 0xFF). Loop: executeInstruction(), then advance the clock by the instruction's cycles
// at the current clk_sys (which the firmware changes when it switches to the crystal), so
// SysTick and the UART see the right time.
//
// Markers (emulator builds only): BKPT #1 / #2 around model_run, BKPT #3 = halt with the
// status in r0. Images without markers (device builds) stop when the UART shows SERENITY-END.
// core.cycles is rp2040js's per-instruction Cortex-M0+ cycle model: it ignores XIP flash
// wait states, bus contention and exception entry costs.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const FLASH_START = 0x10000000;
const SRAM_START = 0x20000000;
const SRAM_TOP = 0x20042000;
const REPORT_END = 'SERENITY-END\n';
const CHECK_EVERY = 100000;

const config = JSON.parse(process.argv[2]);
const entry = join(config.rp2040js, 'dist', 'esm', 'index.js');
const { RP2040 } = await import(pathToFileURL(entry).href);

const mcu = new RP2040();
const { core, clock } = mcu;
const result = {
  uart: '', stop: null, status: null, cycles: null, instructions: null,
  total_cycles: 0, total_instructions: 0, wall_seconds: 0, warnings: [],
};
mcu.logger = {
  debug() {},
  info() {},
  warn(component, message) { result.warnings.push(`[${component}] ${message}`); },
  error(component, message) { throw new Error(`[${component}] ${message}`); },
};

for (const { address, file } of config.segments) {
  const data = readFileSync(file);
  if (address >= SRAM_START && address + data.length <= SRAM_TOP) {
    mcu.sram.set(data, address - SRAM_START);
  } else if (address >= FLASH_START && address + data.length <= FLASH_START + mcu.flash.length) {
    mcu.flash.set(data, address - FLASH_START);
  } else {
    const where = `0x${address.toString(16)} (${data.length} B)`;
    throw new Error(`segment at ${where} is outside flash and SRAM`);
  }
}

if (config.vtor !== null) {
  core.VTOR = config.vtor;
  core.reset();
} else {
  core.reset();
  core.SP = SRAM_TOP;
  core.PC = config.entry & ~1;
}

let instructions = 0;
let startCycles = 0;
let startInstructions = 0;
mcu.uart[0].onByte = (byte) => {
  result.uart += String.fromCharCode(byte);
  if (result.uart.endsWith(REPORT_END) && result.stop === null) result.stop = 'report_end';
};
mcu.onBreak = (code) => {
  if (code === 1) {
    startCycles = core.cycles;
    startInstructions = instructions;
  } else if (code === 2) {
    result.cycles = core.cycles - startCycles;
    result.instructions = instructions - startInstructions;
  } else if (code === 3) {
    result.stop = 'halt';
    result.status = core.registers[0] | 0;
  } else {
    result.stop = `bkpt_${code}`;
  }
};

const t0 = process.hrtime.bigint();
const deadline = Date.now() + config.timeout_s * 1000;
try {
  while (result.stop === null) {
    for (let i = 0; i < CHECK_EVERY && result.stop === null; i++) {
      if (core.waiting) {
        const nanos = clock.nanosToNextAlarm;
        if (!(nanos > 0 && Number.isFinite(nanos))) {
          result.stop = 'wfi_forever';
          break;
        }
        clock.tick(nanos);
      } else {
        const cycles = core.executeInstruction();
        instructions++;
        clock.tick((cycles * 1e9) / mcu.clkSys);
      }
    }
    if (result.stop === null && Date.now() > deadline) result.stop = 'timeout';
    if (result.stop === null && config.max_cycles !== null && core.cycles > config.max_cycles) {
      result.stop = 'max_cycles';
    }
    if (result.stop === null && result.warnings.some((w) => w.includes('not implemented'))) {
      result.stop = 'unimplemented_instruction';
    }
  }
} catch (err) {
  result.stop = 'emulator_error';
  result.warnings.push(String(err && err.message ? err.message : err));
}
result.wall_seconds = Number(process.hrtime.bigint() - t0) / 1e9;
result.total_cycles = core.cycles;
result.total_instructions = instructions;
result.pc = core.PC;
process.stdout.write(JSON.stringify(result) + '\n');
