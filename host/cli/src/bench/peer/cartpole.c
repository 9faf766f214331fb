// The bench peer's plant: the cart-pole with the original's core-module ABI (a
// wasm32-wasi reactor exporting alloc, sim_width, sim_init, sim_get, sim_step), the
// same physics and fixed 1 ms Euler substeps as guests/sims/cartpole, so the peer's
// trajectory is the same bits as ours. Built by `plimsoll-host bench sim` with
// clang-19; it is the original's architecture, measured beside ours.
#include <math.h>
#include <stdlib.h>

static double x, v, theta, omega, force, half_length, cart_mass, time_now;
static long substeps;

__attribute__((export_name("alloc"))) void *sim_alloc(size_t n) { return malloc(n); }
__attribute__((export_name("sim_width"))) int sim_width(void) { return 4; }

__attribute__((export_name("sim_init")))
int sim_init(double p0, double p1, double p2, double h, double t_end) {
    (void)h;
    (void)t_end;
    x = 0; v = 0; theta = p0; omega = 0; force = 0; half_length = p1; cart_mass = p2;
    substeps = 0; time_now = 0;
    return 0;
}

__attribute__((export_name("sim_get")))
int sim_get(double *out) {
    out[0] = x; out[1] = v; out[2] = theta; out[3] = omega;
    return 0;
}

static void derivatives(double *dx) {
    const double m = 0.1, g = 9.81, fmax = 20;
    double f = force;
    if (f > fmax) f = fmax;
    if (f < -fmax) f = -fmax;
    double s = sin(theta), c = cos(theta), total = cart_mass + m, l = half_length;
    double temp = (f + m * l * omega * omega * s) / total;
    double der_omega = (g * s - c * temp) / (l * (4.0 / 3.0 - m * c * c / total));
    dx[0] = v;
    dx[1] = temp - m * l * der_omega * c / total;
    dx[2] = omega;
    dx[3] = der_omega;
}

__attribute__((export_name("sim_step")))
int sim_step(double u, double *out) {
    force = u;
    const double hs = 1e-3;
    double target = time_now + 0.01;
    while (!(time_now + hs > target && fabs(time_now + hs - target) > 1e-5)) {
        double dx[4];
        derivatives(dx);
        x = x + hs * dx[0]; v = v + hs * dx[1]; theta = theta + hs * dx[2]; omega = omega + hs * dx[3];
        substeps++;
        time_now = substeps * hs;
    }
    return sim_get(out) == 0 ? 1 : -6;
}
