/* ByteTrack's per-frame update (bytetrack_core.update) in C, for the frames of several streams in one call.

Each stream is updated on its own, exactly as bytetrack_core does it with numpy (same stages, same formulas in the
same order, so the same doubles), one loop over the streams instead of numpy's per-call overhead. Self-contained:
no headers, libc's malloc and libm's sqrt only (see native/cc.py). Layouts are bytetrack_native.py's. */

void *malloc(unsigned long size);
void free(void *ptr);
double sqrt(double x);

typedef long long i64;
typedef unsigned char u8;

#define ROWS 20 /* packed Kalman state: mean (8), then var, cross, rate_var (4 each) */
#define INF (1.0 / 0.0)

typedef struct {
    double high, low, new_track, match_iou, low_iou, tentative_iou, recover_sigmas, recover_iou, gate, grace_iou;
    double unit_std[4], pos_var, rate_var[4], min_size, initial_velocity;
    i64 grace_ns, max_lost_ns, coast_ns, min_hits, per_class, fuse_score;
} Cfg;

typedef struct {
    double x[ROWS];
    i64 id, hits, first, last, label;
    double score, angle, size[2];
    u8 lost;
    i64 det; /* the detection matched this frame, -1 */
    double iv[4]; /* the prediction's innovation variance (associate) */
} Track;

typedef struct { /* a table of tracks as columns: row r of the states at states[r * stride + t] */
    double *states; i64 *ids, *hits, *first, *last; u8 *lost; i64 *labels; double *scores, *angles, *sizes;
    i64 stride;
} Table;

typedef struct { /* one stream's detections */
    int n; const double *boxes; const double *z; i64 zs; double *scores; const i64 *labels; const double *angles;
    u8 *bad;
} Dets;

static double scale(const double *pos, int i, double min_size) {
    double s = pos[2 + (i & 1)];
    return s > min_size ? s : min_size;
}

static double dmax(double a, double b) { return a > b ? a : b; }
static double dmin(double a, double b) { return a < b ? a : b; }

static void predict(const Cfg *c, double *x, double dt) {
    if (!(dt > 0)) return;
    for (int i = 0; i < 4; ++i) x[i] += dt * x[4 + i];
    for (int i = 2; i < 4; ++i) x[i] = dmax(x[i], 1.0);
    for (int i = 0; i < 4; ++i) {
        double s = scale(x, i, c->min_size);
        double *var = x + 8 + i, *cross = x + 12 + i, *rate_var = x + 16 + i;
        *var += dt * *cross;
        *cross += dt * *rate_var;
        *var += dt * *cross;
        s *= s;
        *var += dt * c->pos_var * s;
        *rate_var += dt * c->rate_var[i] * s;
    }
}

static double innovation_var(const Cfg *c, const double *x, int i) {
    double m = c->unit_std[i] * scale(x, i, c->min_size);
    return x[8 + i] + m * m;
}

static void correct(const Cfg *c, double *x, const double *z, i64 zs) {
    double gain0[4], gain1[4], innov[4];
    for (int i = 0; i < 4; ++i) {
        double s = innovation_var(c, x, i);
        gain0[i] = x[8 + i] / s;
        gain1[i] = x[12 + i] / s;
        innov[i] = z[i * zs] - x[i];
    }
    for (int i = 0; i < 4; ++i) { x[i] += gain0[i] * innov[i]; x[4 + i] += gain1[i] * innov[i]; }
    for (int i = 2; i < 4; ++i) x[i] = dmax(x[i], 1.0);
    for (int i = 0; i < 4; ++i) {
        x[16 + i] -= gain1[i] * x[12 + i];
        x[8 + i] -= gain0[i] * x[8 + i];
        x[12 + i] -= gain0[i] * x[12 + i];
    }
}

static double mahalanobis_sq(const Track *t, const double *z, i64 zs) {
    double d = 0;
    for (int i = 0; i < 4; ++i) {
        double y = z[i * zs] - t->x[i];
        d += y * y / t->iv[i];
    }
    return d;
}

static void edges(const double *cxcywh, i64 stride, double *out) {
    double cx = cxcywh[0], cy = cxcywh[stride], w = cxcywh[2 * stride], h = cxcywh[3 * stride];
    out[0] = cx + w * -0.5; out[1] = cy + h * -0.5; out[2] = cx + w * 0.5; out[3] = cy + h * 0.5;
}

static double iou(const double *a, const double *b) {
    if (a[2] <= b[0] || b[2] <= a[0] || a[3] <= b[1] || b[3] <= a[1]) return 0.0; /* apart: what the rest gives */
    double wa = dmax(a[2] - a[0], 0.0), ha = dmax(a[3] - a[1], 0.0), wb = dmax(b[2] - b[0], 0.0),
           hb = dmax(b[3] - b[1], 0.0);
    double ow = dmin(a[2], b[2]) - dmax(a[0], b[0]), oh = dmin(a[3], b[3]) - dmax(a[1], b[1]);
    ow = dmax(ow, 0.0); oh = dmax(oh, 0.0);
    double inter = ow * oh, uni = wa * ha + wb * hb;
    uni -= inter;
    return uni > 0 ? inter / uni : 0.0;
}

static double slack_iou(const double *pos, const double *slack, const double *z, i64 zs) {
    double overlap[2];
    for (int i = 0; i < 2; ++i) {
        double d = pos[i] - z[i * zs];
        double offset = dmax((d < 0 ? -d : d) - slack[i], 0.0);
        double s1 = dmax(pos[2 + i], 0.0), s2 = dmax(z[(2 + i) * zs], 0.0);
        overlap[i] = dmax(dmin((s1 + s2) / 2 - offset, dmin(s1, s2)), 0.0);
    }
    double inter = overlap[0] * overlap[1];
    double s1w = dmax(pos[2], 0.0), s1h = dmax(pos[3], 0.0), s2w = dmax(z[2 * zs], 0.0), s2h = dmax(z[3 * zs], 0.0);
    double uni = s1w * s1h + s2w * s2h - inter;
    return uni > 0 ? inter / uni : 0.0;
}

/* Minimum-cost assignment of each of nr rows to a distinct column (nr <= nc), cost[i * nc + j]: the shortest
   augmenting path method (Crouse 2016, the algorithm scipy's linear_sum_assignment uses). col4row: out [nr]. */
static void assign(int nr, int nc, const double *cost, int *col4row, double *work, int *iwork) {
    double *u = work, *v = u + nr, *spc = v + nc;
    int *path = iwork, *row4col = path + nc, *remaining = row4col + nc;
    u8 *sr = (u8 *)(remaining + nc), *sc = sr + nr;
    for (int i = 0; i < nr; ++i) { u[i] = 0; col4row[i] = -1; }
    for (int j = 0; j < nc; ++j) { v[j] = 0; row4col[j] = -1; }
    for (int cur = 0; cur < nr; ++cur) {
        double min_val = 0;
        int i = cur, left = nc, sink = -1;
        for (int k = 0; k < nc; ++k) { remaining[k] = nc - k - 1; spc[k] = INF; sc[k] = 0; path[k] = -1; }
        for (int k = 0; k < nr; ++k) sr[k] = 0;
        while (sink < 0) {
            int index = -1;
            double lowest = INF;
            sr[i] = 1;
            for (int it = 0; it < left; ++it) {
                int j = remaining[it];
                double r = min_val + cost[i * nc + j] - u[i] - v[j];
                if (r < spc[j]) { path[j] = i; spc[j] = r; }
                if (spc[j] < lowest || (spc[j] == lowest && row4col[j] == -1)) { lowest = spc[j]; index = it; }
            }
            min_val = lowest;
            int j = remaining[index];
            if (row4col[j] == -1) sink = j; else i = row4col[j];
            sc[j] = 1;
            remaining[index] = remaining[--left];
        }
        u[cur] += min_val;
        for (int k = 0; k < nr; ++k) if (sr[k] && k != cur) u[k] += min_val - spc[col4row[k]];
        for (int k = 0; k < nc; ++k) if (sc[k]) v[k] -= min_val - spc[k];
        for (int j = sink;;) {
            int r = path[j];
            row4col[j] = r;
            int previous = col4row[r];
            col4row[r] = j;
            j = previous;
            if (r == cur) break;
        }
    }
}

typedef struct { /* one stream's association state */
    int nt, nd;
    Track *t;
    const Dets *d;
    u8 *taken;         /* [nd] the detection is matched */
    double *sim;       /* [nt * nd] */
    u8 *row_ok, *col_ok;
    double *work; int *iwork; double *cost; int *col4row; int *rows, *cols; /* scratch for the solver */
} Stage;

static void pair(Stage *g, int r, int c) { g->t[r].det = c; g->taken[c] = 1; }

/* Match free rows (row_ok) to free columns (col_ok) on g->sim >= min_sim, maximising the summed margin: all
   candidates when no row or column has two, else the optimal assignment (match_pairs). Returns matches made. */
static int match(Stage *g, double min_sim) {
    int nt = g->nt, nd = g->nd, conflict = 0, found = 0;
    int *row_hits = g->rows, *col_hits = g->cols;
    for (int r = 0; r < nt; ++r) row_hits[r] = 0;
    for (int c = 0; c < nd; ++c) col_hits[c] = 0;
    for (int r = 0; r < nt; ++r) {
        if (!g->row_ok[r]) continue;
        for (int c = 0; c < nd; ++c)
            if (g->col_ok[c] && g->sim[r * nd + c] >= min_sim) {
                conflict |= ++row_hits[r] > 1;
                conflict |= ++col_hits[c] > 1;
                found++;
            }
    }
    if (!found) return 0;
    if (!conflict) {
        for (int r = 0; r < nt; ++r) {
            if (!g->row_ok[r]) continue;
            for (int c = 0; c < nd; ++c)
                if (g->col_ok[c] && g->sim[r * nd + c] >= min_sim) pair(g, r, c);
        }
        return found;
    }
    /* the solver only needs the rows and columns with a candidate: the others would take margins of 0 */
    int nr = 0, nc = 0;
    for (int r = 0; r < nt; ++r) if (row_hits[r]) g->rows[nr++] = r;
    for (int c = 0; c < nd; ++c) if (col_hits[c]) g->cols[nc++] = c;
    int flip = nr > nc, a = flip ? nc : nr, b = flip ? nr : nc, made = 0;
    for (int i = 0; i < nr; ++i)
        for (int j = 0; j < nc; ++j) {
            double s = g->sim[g->rows[i] * nd + g->cols[j]];
            double margin = s >= min_sim ? s - min_sim + 1e-9 : 0.0;
            g->cost[flip ? j * nr + i : i * nc + j] = -margin;
        }
    assign(a, b, g->cost, g->col4row, g->work, g->iwork);
    for (int i = 0; i < a; ++i) {
        int j = g->col4row[i], r = flip ? g->rows[j] : g->rows[i], c = flip ? g->cols[i] : g->cols[j];
        if (-g->cost[i * b + j] > 0) { pair(g, r, c); made++; }
    }
    return made;
}

static int allowed(const Cfg *c, const Track *t, const Dets *d, int k) {
    int ok = c->gate > 0 ? mahalanobis_sq(t, d->z + k, d->zs) <= c->gate : 1;
    return ok && (!c->per_class || t->label == d->labels[k]);
}

/* The ByteTrack stages (bytetrack_core._associate) on one stream: sets each track's det and g->taken. */
static void associate(const Cfg *c, Stage *g, i64 pts, double *iou_m, double *other, u8 *gated, double *tedges,
                      double *dedges) {
    int nt = g->nt, nd = g->nd;
    const Dets *d = g->d;
    Track *t = g->t;
    if (!nt || !nd) return;
    for (int r = 0; r < nt; ++r) {
        edges(t[r].x, 1, tedges + 4 * r);
        for (int i = 0; i < 4; ++i) t[r].iv[i] = innovation_var(c, t[r].x, i);
    }
    for (int k = 0; k < nd; ++k) edges(d->z + k, d->zs, dedges + 4 * k);
    for (int r = 0; r < nt; ++r)
        for (int k = 0; k < nd; ++k) {
            double v = iou(tedges + 4 * r, dedges + 4 * k);
            u8 out = v != 0 && !allowed(c, t + r, d, k);
            iou_m[r * nd + k] = out ? 0.0 : v;
            gated[r * nd + k] = out;
        }
    /* (1) confirmed tracks take the high-score detections */
    g->sim = iou_m;
    if (c->fuse_score) {
        for (int r = 0; r < nt; ++r) for (int k = 0; k < nd; ++k) other[r * nd + k] = iou_m[r * nd + k] * d->scores[k];
        g->sim = other;
    }
    for (int r = 0; r < nt; ++r) g->row_ok[r] = t[r].id >= 0;
    for (int k = 0; k < nd; ++k) g->col_ok[k] = d->scores[k] >= c->high;
    match(g, c->match_iou);
    /* (2) confirmed tracks still free take the low-score detections */
    g->sim = iou_m;
    for (int r = 0; r < nt; ++r) g->row_ok[r] = t[r].id >= 0 && t[r].det < 0;
    for (int k = 0; k < nd; ++k) g->col_ok[k] = d->scores[k] >= c->low && !(d->scores[k] >= c->high);
    match(g, c->low_iou);
    /* (3) recovery: the predicted centre may move recover_sigmas standard deviations */
    for (int r = 0; r < nt; ++r) g->row_ok[r] = t[r].id >= 0 && t[r].det < 0;
    for (int k = 0; k < nd; ++k) g->col_ok[k] = d->scores[k] >= c->high && !g->taken[k];
    if (c->recover_sigmas > 0) {
        for (int r = 0; r < nt; ++r) { /* match reads the free pairs only */
            if (!g->row_ok[r]) continue;
            double slack[2] = {c->recover_sigmas * sqrt(t[r].x[8]), c->recover_sigmas * sqrt(t[r].x[9])};
            for (int k = 0; k < nd; ++k)
                if (g->col_ok[k])
                    other[r * nd + k] = slack_iou(t[r].x, slack, d->z + k, d->zs) * (allowed(c, t + r, d, k) ? 1.0 : 0.0);
        }
        g->sim = other;
        match(g, c->recover_iou);
    }
    /* (4) grace: a track seen within grace_ns takes what the gate kept from it, by IoU with where it was seen */
    if (c->grace_ns) {
        int any = 0;
        for (int k = 0; k < nd; ++k) g->col_ok[k] = 0;
        for (int r = 0; r < nt; ++r) {
            g->row_ok[r] = 0;
            if (!(t[r].id >= 0 && t[r].det < 0 && t[r].last >= pts - c->grace_ns)) continue;
            double back = (double)(pts - t[r].last) / 1e9, last[4], last_edges[4];
            for (int i = 0; i < 4; ++i) last[i] = t[r].x[i] - back * t[r].x[4 + i];
            edges(last, 1, last_edges);
            for (int k = 0; k < nd; ++k) {
                double s = -1.0;
                if (gated[r * nd + k] && d->scores[k] >= c->high && !g->taken[k]) {
                    s = iou(last_edges, dedges + 4 * k);
                    if (c->per_class) s *= t[r].label == d->labels[k] ? 1.0 : 0.0;
                    if (!(s >= c->grace_iou)) s = -1.0;
                }
                other[r * nd + k] = s;
                if (s >= 0) g->row_ok[r] = g->col_ok[k] = 1;
            }
            any |= g->row_ok[r];
        }
        if (any) {
            g->sim = other;
            match(g, c->grace_iou);
        }
    }
    /* (5) tentative tracks take the high-score detections left */
    g->sim = iou_m;
    for (int r = 0; r < nt; ++r) g->row_ok[r] = t[r].id < 0;
    for (int k = 0; k < nd; ++k) g->col_ok[k] = d->scores[k] >= c->high && !g->taken[k];
    match(g, c->tentative_iou);
}

static void load(const Table *in, i64 at, Track *t) {
    for (int r = 0; r < ROWS; ++r) t->x[r] = in->states[r * in->stride + at];
    t->id = in->ids[at]; t->hits = in->hits[at]; t->first = in->first[at]; t->last = in->last[at];
    t->lost = in->lost[at]; t->label = in->labels[at]; t->score = in->scores[at]; t->angle = in->angles[at];
    t->size[0] = in->sizes[at]; t->size[1] = in->sizes[in->stride + at];
    t->det = -1;
}

static void store(const Track *t, Table *out, i64 at) {
    for (int r = 0; r < ROWS; ++r) out->states[r * out->stride + at] = t->x[r];
    out->ids[at] = t->id; out->hits[at] = t->hits; out->first[at] = t->first; out->last[at] = t->last;
    out->lost[at] = t->lost; out->labels[at] = t->label; out->scores[at] = t->score; out->angles[at] = t->angle;
    out->sizes[at] = t->size[0]; out->sizes[out->stride + at] = t->size[1];
}

/* One frame of each of S streams (bytetrack_core.update). Per stream s: meta[4 s ..] = pts, tracks, detections,
   next id (updated); dt[s] seconds since its last update. `in`: the streams' tracks, grouped by stream. Detections
   grouped by stream: boxes [N][4] (unrotated xyxy), z [4][N] (measured cxcywh), scores (bad rows set to -inf),
   labels, angles (NULL: axis-aligned). Outputs (cap = T + N), compact in stream order: `out` (stride cap),
   oi = det_ids [N], ended [T], the shown tracks' id, first, last, row [cap each], the predicted boxes' label, id
   [cap each], counts [4 S] (tracks, ended, shown, predicted per stream); ob = bad [N], shown lost, shown predicted
   [cap each]; of32 = predicted boxes [cap][4], scores [cap], angles [cap]. Returns 0, or -1 when out of memory. */
int bt_update(const Cfg *c, int S, i64 *meta, const double *dt, const Table *in, const double *boxes,
              const double *z, i64 N, double *scores, const i64 *labels, const double *angles, Table *out, i64 *oi,
              u8 *ob, float *of32) {
    i64 T = in->stride, cap = out->stride, max_t = 0, max_d = 0;
    for (int s = 0; s < S; ++s) {
        if (meta[4 * s + 1] + meta[4 * s + 2] > max_t) max_t = meta[4 * s + 1] + meta[4 * s + 2];
        if (meta[4 * s + 2] > max_d) max_d = meta[4 * s + 2];
    }
    i64 *det_ids = oi, *ended = det_ids + N, *r_id = ended + T, *r_first = r_id + cap, *r_last = r_first + cap,
        *r_row = r_last + cap, *p_label = r_row + cap, *p_id = p_label + cap, *counts = p_id + cap;
    u8 *bad = ob, *r_lost = bad + N, *r_pred = r_lost + cap;
    float *p_box = of32, *p_score = p_box + 4 * cap, *p_angle = p_score + cap;
    i64 m = max_t > 1 ? max_t : 1, dn = max_d > 1 ? max_d : 1, big = (m > dn ? m : dn) + 1;
    Track *tracks = malloc(sizeof(Track) * m);
    double *dwork = malloc(sizeof(double) * (3 * m * dn + 4 * m + 4 * dn + 3 * big));
    int *iwork = malloc(sizeof(int) * 6 * big + 2 * big);
    u8 *bwork = malloc(m * dn + m + 2 * dn);
    if (!tracks || !dwork || !iwork || !bwork) { free(tracks); free(dwork); free(iwork); free(bwork); return -1; }
    double *iou_m = dwork, *other = iou_m + m * dn, *cost = other + m * dn, *tedges = cost + m * dn,
           *dedges = tedges + 4 * m, *solver = dedges + 4 * dn;
    int *col4row = iwork, *rows = col4row + big, *cols = rows + big, *solver_i = cols + big;
    u8 *gated = bwork, *row_ok = gated + m * dn, *col_ok = row_ok + m, *taken = col_ok + dn;
    i64 t0 = 0, d0 = 0, o = 0, e = 0, shown = 0, pred = 0;
    for (int s = 0; s < S; ++s) {
        i64 pts = meta[4 * s], nt_in = meta[4 * s + 1], nd = meta[4 * s + 2];
        int nt = 0;
        i64 e0 = e, shown0 = shown, pred0 = pred, o0 = o;
        /* predict, then drop the tracks unseen for longer than max_lost (their confirmed ids end) */
        for (i64 a = t0; a < t0 + nt_in; ++a) {
            load(in, a, tracks + nt);
            predict(c, tracks[nt].x, dt[s]);
            if (tracks[nt].last < pts - c->max_lost_ns) {
                if (tracks[nt].id >= 0) ended[e++] = tracks[nt].id;
            } else nt++;
        }
        for (i64 i = e0 + 1; i < e; ++i) /* ascending (insertion sort: a handful) */
            for (i64 j = i; j > e0 && ended[j - 1] > ended[j]; --j) { i64 x = ended[j]; ended[j] = ended[j - 1]; ended[j - 1] = x; }
        /* the detections no stage may take: a NaN or infinite value, a width or height <= 0 */
        Dets d = {(int)nd, boxes + 4 * d0, z + d0, N, scores + d0, labels + d0, angles ? angles + d0 : 0, bad + d0};
        for (int k = 0; k < nd; ++k) {
            const double *b = d.boxes + 4 * k;
            int ok = d.scores[k] - d.scores[k] == 0 && b[2] - b[0] > 0 && b[3] - b[1] > 0;
            for (int i = 0; i < 4; ++i) ok = ok && d.z[k + i * N] - d.z[k + i * N] == 0;
            d.bad[k] = !ok;
            if (!ok) d.scores[k] = -INF;
            taken[k] = 0;
        }
        Stage g = {nt, (int)nd, tracks, &d, taken, 0, row_ok, col_ok, solver, solver_i, cost, col4row, rows, cols};
        associate(c, &g, pts, iou_m, other, gated, tedges, dedges);
        /* correct the matched tracks, mark the others lost; a tentative track that missed is dropped */
        int kept = 0;
        for (int r = 0; r < nt; ++r) {
            Track *t = tracks + r;
            if (t->det >= 0) {
                int k = (int)t->det;
                correct(c, t->x, d.z + k, N);
                if (d.angles) {
                    t->angle = d.angles[k];
                    t->size[0] = d.boxes[4 * k + 2] - d.boxes[4 * k]; t->size[1] = d.boxes[4 * k + 3] - d.boxes[4 * k + 1];
                }
                t->lost = 0; t->hits += 1; t->last = pts; t->label = d.labels[k]; t->score = d.scores[k];
            } else {
                t->lost = 1; t->hits = 0;
                if (t->id < 0) continue;
            }
            tracks[kept++] = *t;
        }
        nt = kept;
        /* the high-score detections left that score enough start tentative tracks */
        double start = c->new_track > c->high ? c->new_track : c->high;
        for (int k = 0; k < nd; ++k) {
            if (taken[k] || !(d.scores[k] >= start)) continue;
            Track *t = tracks + nt++;
            for (int r = 0; r < ROWS; ++r) t->x[r] = 0;
            for (int i = 0; i < 4; ++i) t->x[i] = d.z[k + i * N];
            for (int i = 0; i < 4; ++i) {
                double sc = scale(t->x, i, c->min_size), sd = c->unit_std[i] * sc, rv = c->initial_velocity * sc;
                t->x[8 + i] = sd * sd;
                t->x[16 + i] = rv * rv;
            }
            t->id = -1; t->hits = 1; t->first = t->last = pts; t->lost = 0; t->label = d.labels[k];
            t->score = d.scores[k]; t->angle = d.angles ? d.angles[k] : 0.0;
            t->size[0] = d.boxes[4 * k + 2] - d.boxes[4 * k]; t->size[1] = d.boxes[4 * k + 3] - d.boxes[4 * k + 1];
            t->det = k;
        }
        /* confirm, ids in table order; then each detection's id, the shown tracks and the predicted boxes */
        for (int k = 0; k < nd; ++k) det_ids[d0 + k] = -1;
        for (int r = 0; r < nt; ++r) {
            Track *t = tracks + r;
            if (t->id < 0 && t->hits >= c->min_hits) t->id = meta[4 * s + 3]++;
            if (t->det >= 0) det_ids[d0 + t->det] = t->id;
            if (t->id >= 0 && !(t->lost && t->last < pts - c->coast_ns)) {
                int predicted = t->det < 0;
                r_id[shown] = t->id; r_first[shown] = t->first; r_last[shown] = t->last; r_lost[shown] = t->lost;
                r_pred[shown] = (u8)predicted;
                r_row[shown++] = predicted ? pred - pred0 : t->det;
                if (predicted) { /* oriented: the envelope's centre, the unrotated box's latest size */
                    double w = d.angles ? t->size[0] : t->x[2], h = d.angles ? t->size[1] : t->x[3];
                    float *b = p_box + 4 * pred;
                    b[0] = (float)(t->x[0] + w * -0.5); b[1] = (float)(t->x[1] + h * -0.5);
                    b[2] = (float)(t->x[0] + w * 0.5); b[3] = (float)(t->x[1] + h * 0.5);
                    p_score[pred] = (float)t->score; p_label[pred] = t->label; p_angle[pred] = (float)t->angle;
                    p_id[pred] = t->id;
                    pred++;
                }
            }
            store(t, out, o++);
        }
        t0 += nt_in; d0 += nd;
        counts[4 * s] = o - o0; counts[4 * s + 1] = e - e0; counts[4 * s + 2] = shown - shown0;
        counts[4 * s + 3] = pred - pred0;
    }
    free(tracks); free(dwork); free(iwork); free(bwork);
    return 0;
}
