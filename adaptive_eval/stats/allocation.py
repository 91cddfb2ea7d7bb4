"""The delta-correct lower-bound program and its solver: how many trials each model needs for
the pairs still open (Kaufmann, Cappe & Garivier 2016; Garivier & Kaufmann 2016).

``policies/allocation.py``'s ``track_and_stop`` tracks its solution; ``benchmarks/`` compare
campaigns against its optimum with the true values.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from adaptive_eval.stats.arrays import FloatArray, IntArray


def kl_log_term(delta: float) -> float:
    """``log(1 / (2.4 delta))``, the lower-bound factor of Kaufmann, Cappe & Garivier (2016)."""
    return math.log(1 / (2.4 * delta))


def pair_gap(difference: FloatArray, epsilon: float | None) -> FloatArray:
    """Distance to the nearest alternative that changes the pair's answer.

    ``max(|D|, eps - |D|)`` with a region of practical equivalence, else ``|D|``.
    """
    d = np.abs(np.asarray(difference, dtype=np.float64))
    if epsilon is None or epsilon <= 0:
        return d
    return np.asarray(np.maximum(d, epsilon - d), dtype=np.float64)


def allocation_program(
    variance: FloatArray,
    pairs: IntArray,
    radius: FloatArray,
    cost: FloatArray | None = None,
    tolerance: float = 1e-6,
    max_sweeps: int = 2000,
) -> FloatArray:
    """Solve ``min sum_i c_i T_i  s.t.  A_i/T_i + A_j/T_j <= r_ij`` for every listed pair.

    ``variance`` is A (per-trial variance of each model's score estimate, (L,)), ``pairs`` a
    (P, 2) array of model indices, ``radius`` r = gap^2 / (2 log(1/(2.4 delta))) per pair.
    Models in no pair get 0. Returns T (float, (L,)).

    Convex in ``x = 1/T``. Solved through its dual: with multipliers ``lambda_p >= 0`` and
    ``Lambda_i = sum_{p ni i} lambda_p``, the primal optimum is ``T_i = sqrt(A_i Lambda_i /
    c_i)`` and the dual ``g(lambda) = sum_i 2 sqrt(c_i A_i Lambda_i) - sum_p lambda_p r_p`` is
    concave, with gradient ``sqrt(k_i/Lambda_i) + sqrt(k_j/Lambda_j) - r_p`` (``k = c A``) and
    Hessian ``-B' diag(sqrt(k_i)/(2 Lambda_i^1.5)) B`` (B the model-pair incidence; tridiagonal
    for the adjacent pairs of an ordering). Maximised by projected Newton (Bertsekas 1982: a
    Newton step on the multipliers off their bound, a diagonally scaled step on those held at
    0, Armijo backtracking along the projection arc) from the single-pair solutions; block
    coordinate ascent takes over if Newton stalls. The primal is scaled to be exactly
    feasible; stops when the duality gap is below ``tolerance`` (relative). Each call starts
    from the same closed-form point and solves to a tight gap, so the result is a function of
    the inputs alone (a resumed campaign plans the same rounds).

    Single pair, unit costs: ``T_a = sqrt(A_a)(sqrt(A_a) + sqrt(A_b)) / r`` (Neyman split).

    >>> t = allocation_program(np.array([1.0, 4.0]), np.array([[0, 1]]), np.array([0.5]))
    >>> [round(float(v), 3) for v in t]
    [6.0, 12.0]
    """
    a = np.maximum(np.asarray(variance, dtype=np.float64), 1e-300)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    r = np.asarray(radius, dtype=np.float64)
    c = np.ones_like(a) if cost is None else np.maximum(np.asarray(cost, dtype=np.float64), 1e-12)
    out = np.zeros_like(a)
    if len(pairs) == 0:
        return out
    dual = _PairDual(a, c, pairs, r)
    lam = (np.sqrt(dual.k[dual.i]) + np.sqrt(dual.k[dual.j])) ** 2 / r**2 / 2
    lam, primal, converged = dual.newton(lam, tolerance)
    if not converged:
        lam, primal = dual.coordinate_ascent(lam, primal, tolerance, max_sweeps)
    out[dual.used] = primal[dual.used]
    return out


class _PairDual:
    """The allocation program's dual (see :func:`allocation_program`) and its two solvers.

    The arrays are a few dozen long and the solvers take a handful of iterations, so a call
    costs what its numpy operations cost one by one: each iterate's ``Lambda`` is summed once
    and shared by the dual value, the gradient and the primal, and what depends on the pairs
    alone is computed here once. Every number is still computed by the same operations in the
    same order, so the iterates (and the solution) are the same to the last bit.
    """

    def __init__(self, a: FloatArray, c: FloatArray, pairs: IntArray, r: FloatArray) -> None:
        self.a, self.c, self.pairs, self.r = a, c, pairs, r
        self.k = c * a
        self.i, self.j = pairs[:, 0], pairs[:, 1]
        self.a_i, self.a_j = a[self.i], a[self.j]
        self.used = np.unique(pairs)
        #: Every model is in some pair (a ranking with all its pairs open): no masks needed.
        self.all_used = len(self.used) == len(a)
        self.flat = pairs.ravel()
        self.incidence = np.zeros((len(a), len(pairs)))
        self.incidence[self.i, np.arange(len(pairs))] = 1.0
        self.incidence[self.j, np.arange(len(pairs))] = 1.0
        # Its transpose laid out by rows: scaling it by the curvature is then one pass. Each
        # entry of the Hessian is a sum of at most two non-zero terms, so the product's
        # summation order cannot change it.
        self.incidence_t = np.ascontiguousarray(self.incidence.T)

    @cached_property
    def blocks(self) -> list[IntArray]:
        """Groups of pairs that share no model (only the coordinate solvers need them)."""
        return _blocks(self.pairs)

    def totals(self, lam: FloatArray) -> FloatArray:
        """Lambda_i: the multipliers of the pairs model i is in, summed."""
        return np.asarray(
            np.bincount(self.flat, np.repeat(lam, 2), minlength=len(self.a)), dtype=np.float64
        )

    def value(self, lam: FloatArray) -> float:
        """The dual at ``lam``; -inf where a model of a pair would get no trials."""
        return self.value_and_totals(lam)[0]

    def value_and_totals(self, lam: FloatArray) -> tuple[float, FloatArray]:
        """The dual at ``lam`` (:meth:`value`) and the ``Lambda`` it was computed from."""
        total = self.totals(lam)
        if self.all_used:
            k, used_total = self.k, total
        else:
            k, used_total = self.k[self.used], total[self.used]
        if (used_total <= 0).any():
            return -np.inf, total
        return float(2 * np.sqrt(k * used_total).sum() - lam @ self.r), total

    def primal(self, lam: FloatArray, total: FloatArray | None = None) -> tuple[FloatArray, float]:
        """The feasible T built from ``lam`` (scaled onto the constraints) and its cost
        (``total``: ``Lambda`` at ``lam`` where the caller has it)."""
        if total is None:
            total = self.totals(lam)
        if self.all_used:
            t = np.sqrt(self.a * np.maximum(total, 1e-300) / self.c)
        else:
            t = np.zeros_like(self.a)
            used = self.used
            t[used] = np.sqrt(self.a[used] * np.maximum(total[used], 1e-300) / self.c[used])
        load = (self.a_i / t[self.i] + self.a_j / t[self.j]) / self.r
        t *= max(1.0, float(load.max()))
        return t, float((self.c * t).sum())

    def newton(self, lam: FloatArray, tolerance: float) -> tuple[FloatArray, FloatArray, bool]:
        """Projected Newton ascent; returns (lambda, best primal, converged)."""
        lam = lam.copy()
        count = len(lam)
        best, primal = np.inf, np.zeros_like(self.a)
        value, total = self.value_and_totals(lam)
        for _ in range(100):
            # Models in no pair have Lambda = 0 and no term in the dual: they get no curvature.
            inside = total > 0
            root = np.sqrt(np.divide(self.k, total, out=np.zeros_like(total), where=inside))
            grad = root[self.i] + root[self.j] - self.r
            # -d2/dLambda2 of 2 sqrt(k Lambda)
            curve = np.divide(root, 2 * total, out=np.zeros_like(total), where=inside)
            t, cost = self.primal(lam, total)
            if cost < best:
                best, primal = cost, t
            if best - value <= tolerance * best:
                return lam, primal, True
            hessian = (self.incidence_t * curve) @ self.incidence  # minus the dual's Hessian
            diagonal = hessian.diagonal().copy()
            regular = hessian  # the diagonal is kept above: regularise in place
            regular.flat[:: count + 1] *= 1 + 1e-12
            # Multipliers held at their bound: those at 0 whose gradient pushes below it, and
            # those the Newton step on the others would carry past 0 (an active-set pass).
            held = (lam <= 0) & (grad < 0)
            step: np.ndarray = np.zeros(count)
            for _ in range(count):
                free = ~held
                try:
                    if not held.any():
                        step = np.linalg.solve(regular, grad)
                    else:
                        step[:] = 0.0
                        if free.any():
                            step[free] = np.linalg.solve(regular[free][:, free], grad[free])
                except np.linalg.LinAlgError:
                    return lam, primal, False
                crossing = free & (grad < 0) & (lam + step < 0)
                if not crossing.any():
                    break
                held |= crossing
            if held.any():
                # A held multiplier goes to 0 at a full step (or further, projected back to 0).
                step[held] = np.minimum(grad[held] / np.maximum(diagonal[held], 1e-300), -lam[held])
            size = 1.0
            while size > 1e-6:
                trial = np.maximum(lam + size * step, 0.0)
                trial_value, trial_total = self.value_and_totals(trial)
                if trial_value >= value + 1e-4 * float(grad @ (trial - lam)):
                    break
                size *= 0.5
            else:
                # The quadratic model is poor here (a multiplier near 0 where sqrt(Lambda)
                # bends hard): one exact sweep over the pairs' own coordinates instead.
                trial = self.sweep(lam)
                trial_value, trial_total = self.value_and_totals(trial)
            lam, value, total = trial, trial_value, trial_total
        return lam, primal, False

    def sweep(self, lam: FloatArray) -> FloatArray:
        """One pass of exact coordinate maximisation, block by block."""
        lam = lam.copy()
        for block in self.blocks:
            total = self.totals(lam)
            bi, bj = self.i[block], self.j[block]
            li = total[bi] - lam[block]
            lj = total[bj] - lam[block]
            lam[block] = _solve_pair_multiplier(
                self.k[bi], self.k[bj], li, lj, self.r[block], lam[block]
            )
        return lam

    def coordinate_ascent(
        self, lam: FloatArray, primal: FloatArray, tolerance: float, max_sweeps: int
    ) -> tuple[FloatArray, FloatArray]:
        """Block coordinate ascent over pairs that share no model (each block solved by a
        monotone Newton iteration in its own coordinate)."""
        lam = lam.copy()
        start, best = self.primal(lam)
        if not primal.any() or best < float((self.c * primal).sum()):
            primal = start
        else:
            best = float((self.c * primal).sum())
        for _ in range(max_sweeps):
            lam = self.sweep(lam)
            t, cost = self.primal(lam)
            if cost < best:
                best, primal = cost, t
            if best - self.value(lam) <= tolerance * best:
                break
        return lam, primal


def _blocks(pairs: IntArray) -> list[IntArray]:
    """Greedy colouring of the pairs so that no two pairs of one block share a model."""
    blocks: list[list[int]] = []
    members: list[set[int]] = []
    for p, (i, j) in enumerate(pairs.tolist()):
        for block, seen in zip(blocks, members, strict=True):
            if i not in seen and j not in seen:
                block.append(p)
                seen.update((i, j))
                break
        else:
            blocks.append([p])
            members.append({i, j})
    return [np.asarray(b, dtype=np.int64) for b in blocks]


def _solve_pair_multiplier(
    ki: FloatArray,
    kj: FloatArray,
    li: FloatArray,
    lj: FloatArray,
    r: FloatArray,
    previous: FloatArray | None = None,
) -> FloatArray:
    """The ``lambda >= 0`` maximising the dual in one pair's coordinate (vectorised).

    The root of ``h(l) = sqrt(ki/(li+l)) + sqrt(kj/(lj+l)) - r`` (decreasing, convex), or 0
    when ``h(0) <= 0``. Newton from a point left of the root increases monotonically to it;
    the previous sweep's value is used as that point where it is left of the root.
    """
    li = np.maximum(li, 0.0)
    lj = np.maximum(lj, 0.0)

    def h(lam: FloatArray) -> tuple[FloatArray, FloatArray]:
        di = np.maximum(li + lam, 1e-300)
        dj = np.maximum(lj + lam, 1e-300)
        si = np.sqrt(ki / di)
        sj = np.sqrt(kj / dj)
        return si + sj - r, -(si / (2 * di) + sj / (2 * dj))

    lam = np.maximum(0.0, np.maximum(ki / r**2 - li, kj / r**2 - lj))
    if previous is not None:
        value, _ = h(previous)
        lam = np.where((value > 0) & (previous > lam), previous, lam)
    for _ in range(60):
        value, slope = h(lam)
        step = np.where(value > 0, -value / slope, 0.0)
        lam = lam + step
        if (step <= 1e-9 * np.maximum(lam, 1e-300)).all():
            break
    return np.asarray(lam, dtype=np.float64)


def lower_bound_trials(
    scores: FloatArray,
    variance: FloatArray,
    delta: float,
    epsilon: float | None,
    adjacent_only: bool = True,
) -> FloatArray:
    """The delta-correct lower bound on trials per model for ranking ``scores``.

    Gaussian form of Kaufmann, Cappe & Garivier (2016): every adjacent pair (in the true order)
    must reach ``A_i/T_i + A_j/T_j <= gap_ij^2 / (2 log(1/(2.4 delta)))`` with ``gap =
    max(|D|, eps - |D|)``. ``variance`` is A_i, the per-trial variance of model i's score
    estimate (``((1/M) sum_q sd_q)^2`` under Neyman allocation across questions).
    """
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    pairs = np.stack([order[:-1], order[1:]], axis=1)
    gap = pair_gap(s[pairs[:, 0]] - s[pairs[:, 1]], epsilon)
    if (gap <= 0).any():
        return np.full(len(s), np.inf)
    radius = gap**2 / (2 * kl_log_term(delta))
    return allocation_program(np.asarray(variance, dtype=np.float64), pairs, radius)


def allocation_program_rows(
    variance: FloatArray,
    pairs: IntArray,
    valid: np.ndarray,
    radius: FloatArray,
    cost: FloatArray,
    tolerance: float = 1e-6,
) -> FloatArray:
    """:func:`allocation_program` for ``S`` programs at once (the forecast's continuations).

    ``variance`` and ``cost`` are (S, L); ``pairs`` (S, P, 2) holds each program's pairs first
    (``valid`` (S, P) marks them; the rest is padding) and ``radius`` (S, P) their radii. The
    same projected Newton ascent from the same start, iterate for iterate, with the padding
    held at 0: each program stops when its own duality gap is below ``tolerance``. The sums
    run over padded rows, so an iterate can differ from the single program's in the last bits;
    a program whose line search stalls, or that has not converged in 100 steps, is finished
    by :func:`allocation_program` itself (the rare cases the single solver also treats apart).
    Returns T (S, L).
    """
    # Padding and models in no pair divide by zero on the way; their results are masked.
    with np.errstate(divide="ignore", invalid="ignore"):
        return _allocation_rows(variance, pairs, valid, radius, cost, tolerance)


def _allocation_rows(
    variance: FloatArray,
    pairs: IntArray,
    valid: np.ndarray,
    radius: FloatArray,
    cost: FloatArray,
    tolerance: float,
) -> FloatArray:
    sims, num_models = variance.shape
    width = pairs.shape[1]
    out = np.zeros((sims, num_models))
    if width == 0 or not valid.any():
        return out
    a = np.maximum(np.asarray(variance, dtype=np.float64), 1e-300)
    c = np.maximum(np.asarray(cost, dtype=np.float64), 1e-12)
    k = c * a
    r = np.where(valid, radius, 1.0)
    i = np.where(valid, pairs[..., 0], 0)
    j = np.where(valid, pairs[..., 1], 0)
    rows = np.arange(sims)[:, None]
    incidence = np.zeros((sims, num_models, width))
    slots = np.broadcast_to(np.arange(width), (sims, width))
    incidence[rows, i, slots] = valid
    incidence[rows, j, slots] = np.maximum(incidence[rows, j, slots], valid)
    used = incidence.any(axis=2)
    a_i, a_j = a[rows, i], a[rows, j]
    k_i, k_j = k[rows, i], k[rows, j]

    def totals(lam: FloatArray) -> FloatArray:
        # Each model is in at most two pairs: a sum of two terms and zeros, in any order.
        found: FloatArray = np.matmul(incidence, lam[..., None])[..., 0]
        return found

    def value_and_totals(lam: FloatArray) -> tuple[FloatArray, FloatArray]:
        total = totals(lam)
        # A model in no pair has Lambda = 0 exactly, so its term is 0 like the used ones'.
        value = 2 * np.sqrt(k * total).sum(axis=1) - (lam * r).sum(axis=1)
        starved = (used & (total <= 0)).any(axis=1)
        return np.where(starved, -np.inf, value), total

    def primal(total: FloatArray) -> tuple[FloatArray, FloatArray]:
        t = np.where(used, np.sqrt(a * np.maximum(total, 1e-300) / c), 0.0)
        load = np.where(valid, (a_i / t[rows, i] + a_j / t[rows, j]) / r, -np.inf)
        t = t * np.maximum(1.0, load.max(axis=1))[:, None]
        return t, (c * t).sum(axis=1)

    lam = np.where(valid, (np.sqrt(k_i) + np.sqrt(k_j)) ** 2 / r**2 / 2, 0.0)
    best = np.full(sims, np.inf)
    solution = np.zeros((sims, num_models))
    value, total = value_and_totals(lam)
    done = np.zeros(sims, dtype=bool)
    apart = np.zeros(sims, dtype=bool)  # finished by the single solver
    for _ in range(100):
        inside = total > 0
        root = np.where(inside, np.sqrt(k / total), 0.0)
        curve = np.where(inside, root / (2 * total), 0.0)
        grad = np.where(valid, root[rows, i] + root[rows, j] - r, 0.0)
        t, spent = primal(total)
        better = ~done & (spent < best)
        best = np.where(better, spent, best)
        solution = np.where(better[:, None], t, solution)
        done |= best - value <= tolerance * best
        live = ~done
        if not live.any():
            break
        # B' diag(curve) B: each entry a sum of at most two products, in any order.
        hessian = np.matmul(np.swapaxes(incidence * curve[..., None], 1, 2), incidence)
        on_diagonal = np.einsum("sii->si", hessian)  # a view: written through
        diagonal = on_diagonal.copy()
        on_diagonal *= 1 + 1e-12
        held = ((lam <= 0) & (grad < 0)) | ~valid
        step = np.zeros((sims, width))
        pending = live.copy()
        for _ in range(width):
            free = ~held
            system = hessian * (free[:, :, None] & free[:, None, :])
            np.einsum("sii->si", system)[...] += held
            rhs = np.where(free, grad, 0.0)
            index = np.nonzero(pending)[0]
            try:
                step[index] = np.linalg.solve(system[index], rhs[index][..., None])[..., 0]
            except np.linalg.LinAlgError:
                apart[index] = True
                done[index] = True
                pending[index] = False
                break
            crossing = pending[:, None] & free & (grad < 0) & (lam + step < 0)
            held |= crossing
            pending = crossing.any(axis=1)
            if not pending.any():
                break
        live = ~done
        moved = held & valid
        step = np.where(
            moved, np.minimum(grad / np.maximum(diagonal, 1e-300), -lam), np.where(valid, step, 0)
        )
        size = np.ones(sims)
        accepted = ~live
        new_lam, new_value, new_total = lam.copy(), value.copy(), total.copy()
        while True:
            searching = ~accepted & (size > 1e-6)
            if not searching.any():
                break
            trial = np.maximum(lam + size[:, None] * step, 0.0)
            trial_value, trial_total = value_and_totals(trial)
            rise = (grad * (trial - lam)).sum(axis=1)
            ok = searching & (trial_value >= value + 1e-4 * rise)
            new_lam[ok], new_value[ok], new_total[ok] = trial[ok], trial_value[ok], trial_total[ok]
            accepted |= ok
            size = np.where(searching & ~ok, size * 0.5, size)
        stalled = live & ~accepted
        apart |= stalled
        done |= stalled
        lam, value, total = new_lam, new_value, new_total
    apart |= ~done
    out = np.where(used, solution, 0.0)
    for sim in np.nonzero(apart)[0].tolist():
        count = int(valid[sim].sum())
        out[sim] = allocation_program(
            variance[sim], pairs[sim, :count], radius[sim, :count], cost[sim], tolerance
        )
    return out
