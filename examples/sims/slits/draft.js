// A first draft: a lens computed from the geometry alone. Each cell's phase is set
// so that its waves arrive at the target's centroid (60 wavelengths off axis) in
// step with the others, and held there. It ignores the hidden phase defect of each
// cell (up to 1.5 rad): never looking at the screen, it cannot see that the cells
// still arrive out of step, so the peak stays smeared and the pattern matches the
// target only to about 0.70, under the 0.95 bar. Not matched.
const { createInterface } = require('readline');

const ncell = 16, nscr = 64, L = 2000, k = 2 * Math.PI;
let phase = null;

createInterface({ input: process.stdin }).on('line', (line) => {
  const obs = line.split(' ').map(Number);
  if (phase === null) {
    let sw = 0, sx = 0;
    for (let j = 0; j < nscr; j++) { sw = sw + obs[nscr + j]; sx = sx + (j - 31.5) * 6.25 * obs[nscr + j]; }
    const x0 = sx / sw;
    phase = [];
    for (let n = 0; n < ncell; n++) phase.push(-k * (Math.sqrt(L * L + (x0 - (n - 7.5) * 4) ** 2) - L));
  }
  process.stdout.write(phase.join(' ') + '\n');
});
