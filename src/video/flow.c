/* flow.c - flow-matching Euler and UniPC (flow.h). */
#include "video/flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double shifted(double shift, double u) { return shift * u / (1.0 + (shift - 1.0) * u); }

int ts_flow_init(ts_flow *f, ts_flow_kind kind, int n, double shift, const double *custom, int n_custom, int64_t len,
                 ts_err *err) {
    memset(f, 0, sizeof *f);
    if (custom) {
        n = n_custom;
        kind = TS_FLOW_EULER;
    }
    if (n < 1 || n > TS_FLOW_MAX_STEPS)
        return ts_err_set(err, "%d steps: expected 1 .. %d", n, TS_FLOW_MAX_STEPS);
    if (!(shift > 0.0) || !isfinite(shift) || shift > 1000.0)
        return ts_err_set(err, "shift %g: expected a value in (0, 1000]", shift);
    if (len < 1)
        return ts_err_set(err, "empty latent");
    f->kind = kind;
    f->n = n;
    f->len = len;
    const double N = 1000.0;
    if (custom) {
        for (int i = 0; i < n; i++) {
            if (!(custom[i] > 0.0 && custom[i] <= N) || (i && !(custom[i] < custom[i - 1])))
                return ts_err_set(err, "timestep %d (%g): custom timesteps must decrease strictly within (0, 1000]",
                                  i, custom[i]);
            f->sigma[i] = (float)shifted(shift, custom[i] / N);
            f->t[i] = (float)custom[i];
        }
    } else if (kind == TS_FLOW_EULER) {
        /* the scheduler's own end points, shifted once at construction */
        const double smin = (float)shifted(shift, (double)(float)(1.0 / N)), smax = 1.0;
        for (int i = 0; i < n; i++) {
            const double t = n == 1 ? smax * N : smax * N + (smin * N - smax * N) * i / (n - 1);
            f->sigma[i] = (float)shifted(shift, t / N);
            f->t[i] = (float)(f->sigma[i] * N);
        }
    } else {
        for (int i = 0; i < n; i++) {
            /* linspace(1, 1/N, n + 1)[:n] */
            double s = 1.0 + (1.0 / N - 1.0) * i / n;
            s = shifted(shift, s);
            if (i == 0 && fabs(s - 1.0) < 1e-6)
                s -= 1e-6; /* diffusers keeps log(sigma) finite */
            f->t[i] = floor(s * N);
            f->sigma[i] = (float)s;
        }
        const size_t b = (size_t)len * sizeof(float);
        f->m_prev = malloc(b);
        f->m_last = malloc(b);
        f->last_sample = malloc(b);
        f->x0 = malloc(b);
        if (!f->m_prev || !f->m_last || !f->last_sample || !f->x0) {
            ts_flow_free(f);
            return ts_err_set(err, "out of memory (%lld latent values)", (long long)len);
        }
    }
    f->sigma[n] = 0.0;
    return 0;
}

void ts_flow_free(ts_flow *f) {
    free(f->m_prev);
    free(f->m_last);
    free(f->last_sample);
    free(f->x0);
    f->m_prev = f->m_last = f->last_sample = f->x0 = NULL;
}

static double lambda(double sigma) { return log(1.0 - sigma) - log(sigma); }

/* The B(h) coefficients of UniPC bh2 for order p (1 or 2) over step h in
 * lambda: h_phi_1 = expm1(-h), B_h = expm1(-h), and b[0..p) of diffusers'
 * recursion. */
static void unipc_coef(double h, int p, double *h_phi_1, double *B_h, double *b) {
    const double hh = -h;
    *h_phi_1 = expm1(hh);
    *B_h = expm1(hh);
    double h_phi_k = *h_phi_1 / hh - 1.0, fact = 1.0;
    for (int i = 1; i <= p; i++) {
        b[i - 1] = h_phi_k * fact / *B_h;
        fact *= i + 1;
        h_phi_k = h_phi_k / hh - 1.0 / fact;
    }
}

/* UniC: corrects x (the sample at sigma[i] the predictor made from
 * last_sample at sigma[i-1]) with the new x0 prediction model_t. */
static void unipc_correct(ts_flow *f, const float *model_t, float *x) {
    const int i = f->step, p = f->this_order;
    const double st = f->sigma[i], ss = f->sigma[i - 1], at = 1.0 - st;
    const double h = lambda(st) - lambda(ss);
    double h_phi_1, B_h, b[2];
    unipc_coef(h, p, &h_phi_1, &B_h, b);
    double rho0 = 0.5, rho1 = 0.0, rk = 1.0;
    if (p == 2) {
        rk = (lambda(f->sigma[i - 2]) - lambda(ss)) / h;
        /* R = [[1, 1], [rk, 1]], R rho = b */
        const double det = 1.0 - rk;
        rho0 = (b[0] - b[1]) / det;
        rho1 = (b[1] - rk * b[0]) / det;
    }
    const float c_x = (float)(st / ss), c_m = (float)(at * h_phi_1), c_b = (float)(at * B_h);
    const float r0 = (float)rho0, r1 = (float)rho1, irk = (float)(1.0 / rk);
    const float *m0 = f->m_last, *m1 = f->m_prev, *xl = f->last_sample;
    for (int64_t k = 0; k < f->len; k++) {
        const float base = c_x * xl[k] - c_m * m0[k];
        const float d1t = model_t[k] - m0[k];
        float corr;
        if (p == 2)
            corr = r0 * ((m1[k] - m0[k]) * irk) + r1 * d1t;
        else
            corr = r0 * d1t;
        x[k] = base - c_b * corr;
    }
}

/* UniP: the sample at sigma[i+1] from x at sigma[i] and the x0 predictions. */
static void unipc_predict(ts_flow *f, float *x) {
    const int i = f->step, p = f->this_order;
    const double st = f->sigma[i + 1], ss = f->sigma[i];
    const float *m0 = f->m_last, *m1 = f->m_prev;
    if (st == 0.0) {
        /* lambda = inf: the update is the x0 prediction itself */
        memcpy(x, m0, (size_t)f->len * sizeof(float));
        return;
    }
    const double at = 1.0 - st, h = lambda(st) - lambda(ss);
    double h_phi_1, B_h, b[2];
    unipc_coef(h, p, &h_phi_1, &B_h, b);
    const float c_x = (float)(st / ss), c_m = (float)(at * h_phi_1), c_b = (float)(at * B_h);
    float irk = 1.0f;
    if (p == 2)
        irk = (float)(1.0 / ((lambda(f->sigma[i - 1]) - lambda(ss)) / h));
    for (int64_t k = 0; k < f->len; k++) {
        const float base = c_x * x[k] - c_m * m0[k];
        x[k] = p == 2 ? base - c_b * (0.5f * ((m1[k] - m0[k]) * irk)) : base;
    }
}

void ts_flow_step(ts_flow *f, const float *v, float *x) {
    const int i = f->step;
    if (f->kind == TS_FLOW_EULER) {
        const float dt = (float)f->sigma[i + 1] - (float)f->sigma[i];
        for (int64_t k = 0; k < f->len; k++)
            x[k] = x[k] + dt * v[k];
        f->step++;
        return;
    }
    /* the x0 prediction of this step */
    const float s = (float)f->sigma[i];
    for (int64_t k = 0; k < f->len; k++)
        f->x0[k] = x[k] - s * v[k];
    if (i > 0)
        unipc_correct(f, f->x0, x);
    float *old = f->m_prev;
    f->m_prev = f->m_last;
    f->m_last = f->x0;
    f->x0 = old;
    int order = f->n - i < 2 ? f->n - i : 2; /* lower_order_final */
    f->this_order = order < f->lower_order_nums + 1 ? order : f->lower_order_nums + 1;
    memcpy(f->last_sample, x, (size_t)f->len * sizeof(float));
    unipc_predict(f, x);
    if (f->lower_order_nums < 2)
        f->lower_order_nums++;
    f->step++;
}
