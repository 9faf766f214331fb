// Rocket: the round trip as three burns, each switched by the state.
// Out: accelerate away up to the rapidity asinh(order / 4), reached when Earth's clock
// reads a quarter of the order (the last tick burns only the part needed). Turn: full
// thrust toward Earth, through the turnaround and back up to the same speed; by
// symmetry each of the four legs takes a quarter of the order on Earth's clock. Home:
// brake at the constant rate (gamma - 1) / (x + 0.01) that stops the ship 0.01 ly past
// Earth (so it does cross home), starting once that rate reaches 80 % of full thrust:
// the reserve absorbs the 0.05-year tick, in which the ship covers half a light-year.
const { createInterface } = require('readline');

const h = 0.05, aMax = 1, reserve = 0.8;
let phase = 0;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [x, beta, , , , order] = line.split('|')[0].trim().split(' ').map(Number);
  const eta = Math.atanh(beta);
  const gamma = Math.cosh(eta);
  let a = 0;
  if (phase === 0) {
    const etaTop = Math.asinh(order / 4);
    a = Math.min(aMax, (etaTop - eta) / h);
    if (a < 1e-6) phase = 1;
  }
  if (phase === 1) {
    a = -aMax;
    if (beta < 0 && gamma - 1 >= reserve * aMax * (x + 0.01)) phase = 2;
  }
  if (phase === 2) a = x > 0 ? Math.min(aMax, (gamma - 1) / (x + 0.01)) : 0;
  process.stdout.write(a + '\n');
});
