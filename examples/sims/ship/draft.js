// A first draft: rudder in proportion to the heading error alone (2 rad of rudder
// per rad of error), with no yaw-rate damping. The rudder only comes back to the
// centre as the heading reaches 30 degrees, and by then the ship is turning fast:
// its yaw takes some 20 s to die away and the rudder lags and slews slowly, so it
// swings far past the ordered course and through the 45-degree overshoot limit.
const { createInterface } = require('readline');

const order = 30 * Math.PI / 180, kp = 2;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [heading] = line.split(' ').map(Number);
  const u = kp * (order - heading);
  process.stdout.write(u + '\n');
});
