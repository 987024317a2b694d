"""Resumable timing of a merged decode run for the ``fitted_v1`` cost form.

A :class:`DecodeClock` times the steps of a run one after the other, in
Python floats, keeping the batch's aggregates (sequences, summed contexts,
KV tiles read, tile crossings by residue) up to date instead of revisiting
every sequence each step: a decode step costs a few float operations
whatever the batch size. The batch changes only at known steps: a sequence
leaves after its last step (it finished), and new sequences join after a
mixed step that prefilled them whole (:meth:`DecodeClock.mixed`). Each step
is timed with the same floating-point operations, in the same order, as the
cost model's single-step ``step_time_s`` and the engine's ``t += dt``, so the
end times are bit-identical to the reference mode's ``env.now``.

Contexts are kept as virtual values: a sequence with context ``c`` at step
index ``j`` (0-based) is stored as ``x = c − j``, so step ``j`` reads ``x + j
+ 1`` KV tokens and crosses a tile boundary when ``(x + j) % tile == 0``.
"""

from __future__ import annotations

import math
from math import sqrt


class DecodeClock:
    """Times the steps of a decode run (see the module docstring).

    ``contexts``: tokens in each sequence's KV cache before step 1 (its
    ``num_computed_tokens`` before the step); ``lasts``: optional, the last
    step (1-based) in which each takes part; ``start``: the run's start (s);
    ``linear_at(T, ns)``: the step's time outside attention (s) for T tokens
    and ns sampled rows, integers (``CostModel._linear_s``'s value, read as
    ``sim.cost_model.count_table.linear_at``; a step lasts attention + it);
    ``cpu_of(S)``: host time (s) of a decode step over S sequences, added to
    the GPU time, or its ``max`` with it when ``overlap``. ``ends`` holds the
    step end times (s) timed so far. ``terms``: optional, the per-batch-size
    terms (:meth:`_batch`) to share with the other clocks of the same
    ``attn``, ``linear_at`` and ``cpu_of`` (pure functions of the size).
    """

    def __init__(self, attn, linear_at, contexts: list[int], lasts: list[int] | None, start: float,
                 cpu_of, overlap: bool, terms: dict[int, tuple] | None = None) -> None:
        t = attn.tile
        self.attn, self.linear_at, self.cpu_of, self.overlap, self.tile = attn, linear_at, cpu_of, overlap, t
        # the attention form's constants, read once per advance() call (the layer count as
        # a float: x * float(n) is x * n, and a float product takes the interpreter's fast path)
        self._consts = (float(attn.layers), attn.ga.launch_s, attn.c1, attn.c2, attn.ca_exp, attn.m1, attn.m2,
                        attn.me_exp, attn.bk, attn.cta, attn.naive)
        self._csq = attn.ca_sqrt  # tc's L^cexp as sqrt(L) (FittedAttention._gen)
        self.S = len(contexts)
        self.X = sum(contexts)
        self.tiles = sum([(x + t) // t for x in contexts])
        crossings = [0] * t  # sequences by residue of the virtual context mod the tile
        for x in contexts:
            crossings[x % t] += 1
        self.crossings = crossings
        leave: dict[int, list[int]] = {}
        if lasts is not None:
            for x, f in zip(contexts, lasts):
                leave.setdefault(f, []).append(x)
        self.leave = leave  # step (1-based) after which they leave → their virtual contexts
        self.ends: list[float] = []
        self.end = start
        self._terms: dict[int, tuple] = {} if terms is None else terms
        self._batch()

    def _batch(self) -> None:
        """Per-batch-size terms (when sequences leave or join; kept per size)."""
        terms = self._terms.get(self.S)
        if terms is None:
            terms = self._size_terms(self.S)
        self.lin, self.cpu, self.bqb, self.bseq, self.ctas = terms
        self.tiles_then = -1  # the memory term depends on the tiles only: cached until they change

    def _size_terms(self, S: int) -> tuple:
        """(linear part, host time, bq b, b seq_head, CTAs) of a decode step
        over S sequences (b = S as a float), computed once per size (``_terms``)."""
        a = self.attn
        b = float(S)
        terms = self._terms[S] = (self.linear_at(S, S), self.cpu_of(S), a.bq * b, b * a.seq_head,
                                  -(-(b * a.kvh) // a.sms) if a.cta else 0.0)
        return terms

    def _enter(self, j: int) -> None:
        """Step index j (0-based) begins: sequences whose last step was j leave,
        and tiles grow where contexts reach a boundary."""
        t = self.tile
        changed = False
        gone = self.leave.pop(j, None)
        if gone:
            cr = self.crossings
            for x in gone:
                self.tiles -= (x + j - 1 + t) // t
                cr[x % t] -= 1
                self.X -= x
            self.S -= len(gone)
            changed = True
        self.tiles += self.crossings[-j % t]
        if changed:
            self._batch()

    def drop(self, x: int, last: int) -> None:
        """Take a sequence out of the batch before the next step is timed (it
        was preempted): ``x`` its virtual context (context at step index j
        minus j), ``last`` the last step it would have decoded."""
        j = len(self.ends)
        t = self.tile
        self.X -= x
        self.S -= 1
        self.tiles -= (x + j - 1 + t) // t
        self.crossings[x % t] -= 1
        self.leave[last].remove(x)
        self._batch()

    def batch_at_next(self) -> int:
        """Sequences decoding in the next step to be timed (after leaves and joins)."""
        gone = self.leave.get(len(self.ends))
        return self.S - (len(gone) if gone else 0)

    def advance(self, k: int, until: float = math.inf) -> None:
        """Time up to ``k`` more decode steps; stop after the first that ends at
        or after ``until`` (s). The caller never times a step with no sequence."""
        j0 = len(self.ends)
        if self.attn.naive or not j0 and 0 in self.leave:  # (a step-0 leave: never planned)
            if j0:
                self._enter(j0)
            self._advance_generic(j0, k, until)
            return
        layers, launch, c1, c2, cexp, m1, m2, mexp, bk, cta, _ = self._consts
        t, S, X, tiles = self.tile, self.S, self.X, self.tiles
        cr = self.crossings
        leave = self.leave
        lin = self.lin
        cpu, overlap = self.cpu, self.overlap
        bqb, bseq, ctas = self.bqb, self.bseq, self.ctas
        tiles_then = self.tiles_then
        tb2 = tp2 = 0.0
        root, csq = sqrt, self._csq
        if tiles_then >= 0:
            tb2, tp2 = self._tb2, self._tp2
        ends = self.ends
        append = ends.append
        end = self.end
        # KV tokens read by step j, X + S (j + 1): an exact integer kept as a float
        # (below 2 ** 53 every add is exact: the same value as float(int)); here
        # those of step j0 − 1, the last timed: the loop enters step j0 (``_enter``)
        L = float(X + S * j0)
        Sf = float(S)
        if not j0:  # the batch as built: step 0's tiles, less the crossings the loop adds
            tiles -= cr[0]
        # sqrt(tc² + tb² + tp²) as FittedAttention._gen adds them (without CTAs tp2 is
        # 0.0, and x + 0.0 is x: the add is left out); a step's end as the engine's t += dt.
        # r: the residue -j % t whose sequences cross into a new tile at step j, counted
        # down with j going up (cheaper than the negation and modulo)
        r, t1 = -j0 % t + 1, t - 1
        for j in range(j0, j0 + k):
            r -= 1
            if r < 0:
                r = t1
            if j in leave:  # finished after step j: out of the batch (``_enter``, in the locals)
                gone = leave.pop(j)
                for x in gone:
                    tiles -= (x + j - 1 + t) // t
                    cr[x % t] -= 1
                    X -= x
                tiles += cr[r]
                if gone:
                    S -= len(gone)
                    terms = self._terms.get(S)
                    lin, cpu, bqb, bseq, ctas = terms if terms is not None else self._size_terms(S)
                    Sf = float(S)
                L = float(X + S * (j + 1))
                tiles_then = -1
            else:
                tiles += cr[r]
                L += Sf
            tc = c1 * L + c2 * (root(L) if csq else L ** cexp)
            if tiles != tiles_then:
                tiles_then = tiles
                tiled = float(tiles * t)
                nbytes = bqb + bk * tiled
                tb = m1 * nbytes + m2 * nbytes ** mexp + bseq
                tb2 = tb * tb
                if cta:
                    tp = ctas * (tiled / Sf) * cta
                    tp2 = tp * tp
            g = root(tc * tc + tb2 + tp2) if cta else root(tc * tc + tb2)
            dt = (launch + g) * layers + lin
            if overlap:
                end += dt if dt > cpu else cpu
            else:
                end += dt + cpu
            append(end)
            if end >= until:
                break
        if S != self.S:  # sequences left: the batch's terms, as ``_enter`` leaves them
            self.S = S
            self._batch()
        self.X, self.tiles, self.end = X, tiles, end
        self.tiles_then, self._tb2, self._tp2 = tiles_then, tb2, tp2

    def _advance_generic(self, j0: int, k: int, until: float) -> None:
        """:meth:`advance`, every case (step j0 entered): with unfused attention
        (``FittedAttention._naive_extra`` added to each step's generation core)."""
        a = self.attn
        layers, launch, c1, c2, cexp, m1, m2, mexp, bk, cta, naive = self._consts
        t, S, X, tiles = self.tile, self.S, self.X, self.tiles
        cr = self.crossings
        leave = self.leave
        lin = self.lin
        cpu, overlap = self.cpu, self.overlap
        bqb, bseq, ctas = self.bqb, self.bseq, self.ctas
        tiles_then = self.tiles_then
        tb2 = tp2 = 0.0
        if tiles_then >= 0:
            tb2, tp2 = self._tb2, self._tp2
        ends = self.ends
        append = ends.append
        end = self.end
        L = float(X + S * (j0 + 1))
        Sf = float(S)
        for j in range(j0, j0 + k):
            if j > j0:
                if j in leave:  # finished after step j: out of the batch
                    self.S, self.X, self.tiles = S, X, tiles
                    self._enter(j)
                    S, X, tiles = self.S, self.X, self.tiles
                    lin = self.lin
                    cpu, bqb, bseq, ctas, tiles_then = self.cpu, self.bqb, self.bseq, self.ctas, -1
                    L = float(X + S * (j + 1))
                    Sf = float(S)
                else:
                    tiles += cr[-j % t]
                    L += Sf
            tc = c1 * L + c2 * (sqrt(L) if self._csq else L ** cexp)
            if tiles != tiles_then:
                tiles_then = tiles
                tiled = float(tiles * t)
                nbytes = bqb + bk * tiled
                tb = m1 * nbytes + m2 * nbytes ** mexp + bseq
                tb2 = tb * tb
                if cta:
                    tp = ctas * (tiled / float(S)) * cta
                    tp2 = tp * tp
            g = sqrt(tc * tc + tb2 + tp2)
            if naive:
                g += a._naive_extra(L)
            dt = (launch + g) * layers + lin
            if overlap:
                end += dt if dt > cpu else cpu
            else:
                end += dt + cpu
            append(end)
            if end >= until:
                break
        self.S, self.X, self.tiles, self.end = S, X, tiles, end
        self.tiles_then, self._tb2, self._tp2 = tiles_then, tb2, tp2

    def join(self, p: int, last: int, cpu: float) -> None:
        """:meth:`mixed` with one chunk, a whole ``p``-token prompt (nothing
        cached), whose sequence then decodes up to its ``last`` step: a span's
        usual join, with the same float operations (``FittedAttention._mixed_s``:
        the generation core as ``_gen`` computes it, its memory terms as
        :meth:`advance` keeps them)."""
        j = len(self.ends)
        leave = self.leave
        gone = leave.get(j)
        layers, _, c1, c2, cexp, m1, m2, mexp, bk, cta, naive = self._consts
        if p < 2 or naive or self.S == (len(gone) if gone else 0):  # (nobody decodes: no generation core)
            self.mixed([(p, 0)], [(p, last)], cpu)
            return
        a = self.attn
        t = self.tile
        if gone is not None:
            self._enter(j)
        elif j:  # (``_enter`` when nobody leaves)
            self.tiles += self.crossings[-j % t]
        S, X, tiles = self.S, self.X, self.tiles
        L = float(X + S * (j + 1))
        tc = c1 * L + c2 * (sqrt(L) if self._csq else L ** cexp)
        if self.tiles_then == tiles:  # the memory terms as advance left them
            tb2, tp2 = self._tb2, self._tp2
        else:  # (tb², tp²) of the batch as it is (``FittedAttention._gen``), as advance computes them
            tiled = float(tiles * t)
            nbytes = self.bqb + bk * tiled
            tb = m1 * nbytes + m2 * nbytes ** mexp + self.bseq
            tb2 = tb * tb
            tp2 = 0.0
            if cta:
                tp = self.ctas * (tiled / float(S)) * cta
                tp2 = tp * tp
        g = sqrt(tc * tc + tb2 + tp2) if cta else sqrt(tc * tc + tb2)
        pc = a._prompt_memo.get(p)
        if pc is None:
            pc = a.prompt_context(p)
        gpu = (a.mixed_launch + (g + pc)) * layers + self.linear_at(S + p, S + 1)
        end = self.end
        if self.overlap:
            end += gpu if gpu >= cpu else cpu
        else:
            end += gpu + cpu
        self.end = end
        self.ends.append(end)
        if last > j + 1:  # (``_join``: one whose last step is step j never decodes)
            x = p - j - 1
            self.X = X + x
            self.tiles = tiles + (p - 1 + t) // t
            self.crossings[x % t] += 1
            leave.setdefault(last, []).append(x)
            S += 1
            self.S = S
            terms = self._terms.get(S)  # (``_batch``)
            self.lin, self.cpu, self.bqb, self.bseq, self.ctas = terms if terms is not None else self._size_terms(S)
        self.tiles_then = -1

    def mixed(self, chunks: list[tuple[int, int]], joins: list[tuple[int, int]], cpu: float) -> None:
        """Time the next step as a mixed one: every decoding sequence plus the
        prefill ``chunks`` (new tokens, tokens already cached) in one varlen
        attention call (``FittedAttention._mixed_s``; a 1-token chunk is costed
        as the kernel sees it, a decode at that context); ``cpu`` (s): the
        step's host time. ``joins``: (context, last step) of the sequences whose
        prefill this step completes; they decode from the next step on, up to
        their last step (1-based; one whose last step is this one never decodes)."""
        j = len(self.ends)
        if j:
            self._enter(j)
        a = self.attn
        S = self.S
        new, cached = zip(*chunks)
        sums = a.batch_sums(new, cached)
        sums[0] += S  # the decoding sequences: S more decodes, their KV reads and tiles
        sums[1] += self.X + S * (j + 1)
        sums[2] += self.tiles
        gpu = a._mixed_s(*sums) + self.linear_at(S + sum(new), S + len(chunks))
        self._mixed_done(j, gpu, cpu, joins)

    def pause(self, dt: float, joins) -> None:
        """A step outside the clock, of ``dt`` seconds (a prefill-only step
        between two decode steps, timed by the caller as the engine times it),
        after which ``joins`` (context, last step) decode from the next step
        on, as :meth:`_mixed_done`'s joins of the last step timed: the next
        step's index is unchanged, and the decoding sequences' contexts with it."""
        self.end += dt
        self._join(len(self.ends) - 1, joins)

    def _mixed_done(self, j: int, gpu: float, cpu: float, joins) -> None:
        """Mixed step j (0-based) lasts ``gpu`` + host ``cpu`` (s); then the
        sequences whose prefill it completed, ``joins`` (context, last step),
        join as if they had decoded at this step with context c − 1 (so the next
        step's crossings bring their tiles to (c + t) // t)."""
        if self.overlap:
            self.end += gpu if gpu >= cpu else cpu
        else:
            self.end += gpu + cpu
        self.ends.append(self.end)
        self._join(j, joins)

    def _join(self, j: int, joins) -> None:
        """``joins`` (context, last step) decode from step j + 1 on, as if they
        had decoded at step j with context c − 1."""
        t, cr, leave = self.tile, self.crossings, self.leave
        n = 0
        for c, f in joins:
            if f > j + 1:  # (one whose last step is step j never decodes)
                x = c - j - 1
                self.X += x
                self.tiles += (c - 1 + t) // t
                cr[x % t] += 1
                leave.setdefault(f, []).append(x)
                n += 1
        if n:
            self.S += n
            self._batch()
        self.tiles_then = -1
