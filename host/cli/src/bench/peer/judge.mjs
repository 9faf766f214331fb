// The bench peer's judge: the original's architecture in node. The plant is a core
// wasm module; the controller is a child `node` process fed one state line per tick
// over pipes, answering one line. Env: PLANT (the module), CONTROLLER (a .js file),
// RUNS. Prints {"runs": [ms...], "fingerprint": hex} on stdout.
import { readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { createHash } from 'node:crypto';

const bytes = readFileSync(process.env.PLANT);
const runs = Number(process.env.RUNS);
const ticks = 2000;

async function once() {
  const { instance } = await WebAssembly.instantiate(bytes, {});
  const e = instance.exports;
  if (e._initialize) e._initialize();
  const ptr = e.alloc(32);
  e.sim_init(0.2, 0.5, 1.0, 0.01, 20);
  const child = spawn(process.execPath, ['--no-warnings', process.env.CONTROLLER], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const record = new Float64Array(ticks * 5);
  for (let k = 0; k < ticks; k++) {
    e.sim_get(ptr);
    const s = new Float64Array(e.memory.buffer, ptr, 4).slice();
    child.stdin.write(s.join(' ') + '\n');
    const { value, done } = await lines.next();
    if (done) throw new Error('controller exited at tick ' + k);
    const u = Number(value.trim());
    record.set(s, k * 5);
    record[k * 5 + 4] = u;
    e.sim_step(u, ptr);
  }
  child.stdin.end();
  await new Promise((resolve) => child.on('close', resolve));
  return createHash('sha256').update(new Uint8Array(record.buffer)).digest('hex');
}

let fingerprint = await once();
const times = [];
for (let i = 0; i < runs; i++) {
  const t = process.hrtime.bigint();
  fingerprint = await once();
  times.push(Number(process.hrtime.bigint() - t) / 1e6);
}
console.log(JSON.stringify({ runs: times, fingerprint }));
