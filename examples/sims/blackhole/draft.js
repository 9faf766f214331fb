// A first draft with Newtonian orbital intuition: change the orbit with tangential
// thrust alone, retrograde when too high and prograde when too low. Inside the
// innermost stable orbit that fails: the circular orbit at r = 5 sits on top of the
// effective-potential hill, and tangential thrust acts on the radius only through
// the angular momentum it slowly builds up, with nothing damping the radial speed.
// The burn turns the kicked probe back near r = 5.18, but with its angular momentum
// spent it falls through r = 5 and the prograde thrust, capped at 0.02, cannot
// rebuild the centrifugal barrier in time: it drops past the photon sphere, captured.
const { createInterface } = require('readline');

const k = 0.05;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [r, , , , , target] = line.split(' ').map(Number);
  const aPhi = -k * (r - target);
  process.stdout.write('0 ' + aPhi + '\n');
});
