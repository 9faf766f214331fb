// Cart-pole swing-up: pump the pole's energy up to the upright value, then catch it
// with linear feedback near upright. Compile for the judge with
//   clang --target=wasm32-wasi -mexec-model=reactor -O2 -ffp-contract=off -Wall -Werror -o controller.wasm accepted.c
// (wasi-libc's cos and fmod are linked in, so the module imports nothing).
#include <math.h>

#define POLE_MASS 0.1
#define GRAVITY 9.81
#define HALF_LENGTH 0.5
#define ENERGY_GAIN 60.0
#define PUMP_X 2.0
#define PUMP_V 3.0
#define CATCH_ANGLE 40.0
#define CATCH_RATE 5.0
#define CATCH_X 1.0
#define CATCH_V 1.0
#define FORCE_MAX 20.0

static int catching = 0;

// The angle from upright in (-pi, pi].
static double wrap(double a) {
    double w = fmod(a + M_PI, 2 * M_PI);
    if (w < 0) w = w + 2 * M_PI;
    return w - M_PI;
}

__attribute__((export_name("control")))
double control(double x, double v, double theta, double omega, int k) {
    (void)k;
    double near = wrap(theta);
    double c = cos(theta);
    if (!catching && c > 0.9 && fabs(omega) < 3.5) catching = 1;
    if (catching && c < 0.3) catching = 0;
    double u;
    if (catching) {
        u = CATCH_ANGLE * near + CATCH_RATE * omega + CATCH_X * x + CATCH_V * v;
    } else {
        double energy = (2.0 / 3.0) * POLE_MASS * HALF_LENGTH * HALF_LENGTH * omega * omega
                      + POLE_MASS * GRAVITY * HALF_LENGTH * c;
        double upright = POLE_MASS * GRAVITY * HALF_LENGTH;
        double direction = (omega * c >= 0) ? 1 : -1;
        u = ENERGY_GAIN * (energy - upright) * direction - PUMP_X * x - PUMP_V * v;
    }
    if (u > FORCE_MAX) u = FORCE_MAX;
    if (u < -FORCE_MAX) u = -FORCE_MAX;
    return u;
}
