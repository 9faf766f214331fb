// A first draft that times the trip on the wrong clock. It means to burn away for a
// quarter of the ordered date, but reads the ship's own clock (`time`) where it
// should read Earth's (`t`), and stops the burn at a quarter of the 14-unit tank
// when its clock has not yet reached 10 years. By then the ship is at 0.998 c, where
// Earth's clock runs 17 times faster than the ship's, and every leg is that much
// longer on Earth's clock: turned round and brought home with the accepted
// controller's rules, it arrives when Earth reads about 70 years, not 40. Missed
// date.
const { createInterface } = require('readline');

const aMax = 1, tank = 14;
let phase = 0;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [x, beta, , time, fuel, order] = line.split(' ').map(Number);
  const gamma = 1 / Math.sqrt(1 - beta * beta);
  let a = aMax;
  if (phase === 0 && (time >= order / 4 || fuel >= tank / 4)) phase = 1;
  if (phase === 1) {
    a = -aMax;
    if (beta < 0 && gamma - 1 >= 0.8 * aMax * (x + 0.01)) phase = 2;
  }
  if (phase === 2) a = x > 0 ? Math.min(aMax, (gamma - 1) / (x + 0.01)) : 0;
  process.stdout.write(a + '\n');
});
