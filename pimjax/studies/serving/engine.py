"""The serving event loop: one iteration (step) at a time, as Orca / vLLM schedule.

A request goes: waiting (arrived, not admitted) -> admitted to a partition
(`KVLayout`) -> prefill (its prompt, in one step or in chunks) -> its first
token at the end of the step that finishes the prompt -> one decode step per
further token -> done at its last token.  KV tokens stored: the prompt, then
one more per decode step (a decode step at context L appends the token's
key / value and attends over L tokens, `decode`'s convention).

Schedulers:

* "continuous" (Orca's iteration-level scheduling, vLLM): requests join and
  leave the batch at every step.  prefill="prefill-first" (vLLM's default
  without chunking): a step that can admit waiting requests prefills their
  whole prompts (as many as the token budget `max_tokens` and `max_batch`
  allow; a prompt above the budget runs alone) and decodes nothing; otherwise
  it decodes every running request.  prefill="decode-first" (chunked prefill,
  Sarathi-Serve / vLLM's chunked mode): every step decodes every running
  request and fills the rest of the budget with prompt chunks (partly
  prefilled requests first, then new admissions).
* "static": a batch of up to `max_batch` waiting requests forms when the
  engine is idle, prefills (prefill-first within the budget), then decodes
  until its longest request finishes; finished requests stay as padding (their
  rows are computed, their KV kept) and none joins until the batch is done.

KV memory (`kv_policy`): "wait" reserves a request's blocks for its whole
final context (prompt + output - 1) at admission, so it never runs out; a
request that does not fit waits at the head of the queue.  "preempt"
(vLLM): blocks are taken as the context grows (admission needs the prompt's
or the first chunk's); when a decoding request needs a block its partition
lacks, the youngest running request of that partition is preempted (its
blocks freed; it re-queues at the head and recomputes prompt + generated
tokens as a prefill).  Both are reported in `events` ("kv_wait": a request
first held back by memory; "preempt"), never silent.  Static batching
always reserves (its padding keeps every block to the end).

Time: the step times come from `StepCosts.step`; the clock jumps to the next
arrival when nothing can run.  Units: ns internally, seconds / ms outside.
"""
from __future__ import annotations

from collections import deque

import numpy as np

SCHEDULERS = ("continuous", "static")
PREFILL_POLICIES = ("prefill-first", "decode-first")
KV_POLICIES = ("wait", "preempt")
STEP_COLUMNS = ("t_ns", "ns", "decodes", "prefills", "prefill_tokens", "tokens", "batch", "running", "waiting",
                "kv_blocks", "kv_tokens", "gpu_ns", "pim_ns")


class _Run:
    """Mutable state of one simulation (private to `simulate`)."""

    def __init__(self, requests, costs, max_batch, max_tokens, kv_policy):
        self.n = len(requests)
        self.arrival = (np.asarray(requests.arrival_s, np.float64) * 1e9).tolist()
        self.prompt = requests.prompt_len.tolist()
        self.output = requests.output_len.tolist()
        n = self.n
        self.target = list(self.prompt)       # tokens the (re)prefill must process
        self.done_pf = [0] * n                # of them, processed
        self.gen = [0] * n                    # tokens generated
        self.ctx = [0] * n                    # KV tokens stored
        self.part = [-1] * n
        self.blocks = [0] * n
        self.seq = [0] * n                    # admission order (youngest = largest)
        self.t_admit = [np.nan] * n
        self.t_first = [np.nan] * n
        self.t_finish = [np.nan] * n
        self.preempted = [0] * n
        self.kv_waited = [False] * n
        self.tokens: list[list] = [[] for _ in range(n)]   # the time (ns) of each generated token
        lay = costs.layout
        self.layout = lay
        self.free = [lay.blocks_per_partition] * lay.partitions
        self.count = [0] * lay.partitions
        self.max_batch, self.max_tokens, self.kv_policy = max_batch, max_tokens, kv_policy
        self.running: list[int] = []          # admission order
        self.live = [False] * n               # r in running
        self.waiting: deque = deque()
        self.next_arrival = 0
        self.admissions = 0
        self.events: list = []
        self.t = 0.0

    # -- memory --------------------------------------------------------------
    def need_at_admission(self, r: int, first_chunk: int) -> int:
        if self.kv_policy == "wait":
            return self.layout.blocks(self.prompt[r] + self.output[r] - 1)
        return self.layout.blocks(first_chunk)

    def admit(self, r: int, need: int) -> bool:
        """Place r in the partition with the fewest requests that has `need` free blocks."""
        best, key = -1, None
        for p, (f, c) in enumerate(zip(self.free, self.count)):
            if f >= need and (key is None or (c, -f) < key):
                best, key = p, (c, -f)
        if best < 0:
            if not self.kv_waited[r]:
                self.kv_waited[r] = True
                self.events.append((self.t, "kv_wait", r, need, max(self.free)))
            return False
        self.free[best] -= need
        self.count[best] += 1
        self.part[r], self.blocks[r] = best, need
        self.admissions += 1
        self.seq[r] = self.admissions
        if np.isnan(self.t_admit[r]):
            self.t_admit[r] = self.t
        self.running.append(r)
        self.live[r] = True
        return True

    def grow(self, r: int, tokens: int) -> bool:
        """Blocks for r's KV to reach `tokens` tokens; False if its partition lacks them."""
        need = self.layout.blocks(tokens) - self.blocks[r]
        if need <= 0:
            return True
        p = self.part[r]
        if self.free[p] < need:
            return False
        self.free[p] -= need
        self.blocks[r] += need
        return True

    def release(self, r: int) -> None:
        p = self.part[r]
        self.free[p] += self.blocks[r]
        self.count[p] -= 1
        self.blocks[r], self.part[r] = 0, -1

    def preempt(self, r: int) -> None:
        """Evict r (recompute later): blocks freed, re-queued at the head."""
        self.running.remove(r)
        self.live[r] = False
        self.events.append((self.t, "preempt", r, self.blocks[r], self.free[self.part[r]]))
        self.release(r)
        self.preempted[r] += 1
        self.target[r] = self.prompt[r] + self.gen[r]
        self.done_pf[r] = 0
        self.ctx[r] = 0
        self.waiting.appendleft(r)

    def youngest_in(self, p: int) -> int:
        cands = [r for r in self.running if self.part[r] == p]
        return max(cands, key=lambda r: self.seq[r])

    def arrivals(self) -> None:
        while self.next_arrival < self.n and self.arrival[self.next_arrival] <= self.t:
            self.waiting.append(self.next_arrival)
            self.next_arrival += 1


def simulate(requests, costs, *, scheduler: str = "continuous", prefill: str = "prefill-first",
             max_batch: int = 64, max_tokens: int = 2048, kv_policy: str = "preempt", progress: bool = False):
    """Run the trace; returns (per-request dict of arrays, steps list, events list).
    per["token_ns"]: each request's token times (ns; the first at its first
    token, one per token: the inter-token latencies are their differences).

    steps: tuples (t_start_ns, ns, decodes, prefills, prefill_tokens, tokens,
    batch, running, waiting, kv_blocks, kv_tokens, gpu_ns, pim_ns) (`STEP_COLUMNS`); events: tuples
    (t_ns, kind, request, blocks, free blocks of the partition / the most free).
    """
    st = _Run(requests, costs, max_batch, max_tokens, kv_policy)
    steps: list = []
    total_blocks = st.layout.total_blocks
    bar = None
    if progress:
        from ..progress import Bar  # rich on a terminal, plain lines otherwise
        bar = Bar(f"serve: {st.n} requests", st.n)
    finished = 0
    static_batch: list[int] = []
    while finished < st.n:
        st.arrivals()
        if not st.running and not st.waiting:
            st.t = max(st.t, st.arrival[st.next_arrival])
            continue
        decodes: list[int] = []
        chunks: list[tuple] = []          # (request, tokens)
        padding: list[int] = []
        if scheduler == "static":
            if not static_batch:
                while st.waiting and len(st.running) < max_batch:
                    r = st.waiting[0]
                    if not st.admit(r, st.layout.blocks(st.prompt[r] + st.output[r] - 1)):
                        break
                    st.waiting.popleft()
                static_batch = list(st.running)
            pending = [r for r in static_batch if st.done_pf[r] < st.target[r]]
            if pending:
                chunks = _whole_prompts(st, pending)
            else:
                decodes = [r for r in static_batch if st.gen[r] < st.output[r]]
                padding = [r for r in static_batch if st.gen[r] >= st.output[r]]
        elif prefill == "prefill-first":
            budget = max_tokens
            new: list[int] = []
            while st.waiting and len(st.running) < max_batch:
                r = st.waiting[0]
                need = st.target[r]
                if need > budget and new:
                    break
                if not st.admit(r, st.need_at_admission(r, need)):
                    break
                st.waiting.popleft()
                new.append(r)
                budget -= need
            if new:
                chunks = [(r, st.target[r]) for r in new]
            else:
                decodes = _grow_decodes(st, [r for r in st.running if st.done_pf[r] >= st.target[r]])
        else:                                       # decode-first, chunked prefill
            decodes = _grow_decodes(st, [r for r in st.running if st.done_pf[r] >= st.target[r]])
            budget = max_tokens - len(decodes)
            for r in [r for r in st.running if st.done_pf[r] < st.target[r]]:
                if budget <= 0:
                    break
                if not st.live[r]:                      # preempted for an older request's chunk
                    continue
                c = min(st.target[r] - st.done_pf[r], budget)
                if _ensure(st, r, st.done_pf[r] + c):
                    chunks.append((r, c))
                    budget -= c
            decodes = [r for r in decodes if st.live[r]]
            while budget > 0 and st.waiting and len(st.running) < max_batch:
                r = st.waiting[0]
                c = min(st.target[r], budget)
                if not st.admit(r, st.need_at_admission(r, c)):
                    break
                st.waiting.popleft()
                chunks.append((r, c))
                budget -= c
        if not decodes and not chunks:
            if st.next_arrival < st.n and not st.running:
                st.t = max(st.t, st.arrival[st.next_arrival])
                continue
            raise RuntimeError(f"serve: nothing can run at t = {st.t / 1e9:.6f} s with {len(st.waiting)} waiting "
                               f"and {len(st.running)} running (KV capacity {total_blocks} blocks)")
        # the step's time
        dec = decodes + padding
        ctx = np.fromiter([st.ctx[r] + 1 for r in decodes] + [st.ctx[r] for r in padding], np.int64, len(dec))
        part = np.fromiter([st.part[r] for r in dec], np.int64, len(dec))
        pchunks = [(c, st.ctx[r]) for r, c in chunks]
        ts = costs.step(ctx, part, pchunks)
        t0 = st.t
        st.t += ts.ns
        # progress at the end of the step
        for r in decodes:
            st.ctx[r] += 1
            st.gen[r] += 1
            st.tokens[r].append(st.t)
        for r, c in chunks:
            st.done_pf[r] += c
            st.ctx[r] += c
            if st.done_pf[r] >= st.target[r]:
                st.gen[r] += 1
                st.tokens[r].append(st.t)
                if np.isnan(st.t_first[r]):
                    st.t_first[r] = st.t
        done = [r for r in decodes + [r for r, _ in chunks] if st.gen[r] >= st.output[r]
                and np.isnan(st.t_finish[r])]
        for r in done:
            st.t_finish[r] = st.t
            finished += 1
            if scheduler == "continuous":
                st.running.remove(r)
                st.live[r] = False
                st.release(r)
        if scheduler == "static" and static_batch and all(st.gen[r] >= st.output[r] for r in static_batch):
            for r in static_batch:
                st.live[r] = False
                st.release(r)
            st.running = [r for r in st.running if st.live[r]]
            static_batch = []
        if bar is not None and done:
            bar.advance(len(done))
        kv_blocks = total_blocks - sum(st.free[:st.layout.partitions])
        ptok = sum(c for _, c in chunks)
        steps.append((t0, ts.ns, len(decodes), len(chunks), ptok, len(dec) + ptok, len(dec) + len(chunks),
                      len(st.running), len(st.waiting), kv_blocks, sum(st.ctx[r] for r in st.running),
                      ts.gpu_ns, ts.pim_ns))
    if bar is not None:
        bar.close()
    per = {"admit_ns": np.array(st.t_admit), "first_ns": np.array(st.t_first), "finish_ns": np.array(st.t_finish),
           "preemptions": np.array(st.preempted), "partition_last": np.array(st.part),
           "token_ns": [np.asarray(t, np.float64) for t in st.tokens]}
    return per, steps, st.events


def _ensure(st: _Run, r: int, tokens: int) -> bool:
    """Blocks for r's KV to reach `tokens`, preempting the youngest request of
    its partition while they lack (r itself last: then False)."""
    while not st.grow(r, tokens):
        v = st.youngest_in(st.part[r])
        st.preempt(v)
        if v == r:
            return False
    return True


def _grow_decodes(st: _Run, decodes: list[int]) -> list[int]:
    """The decoding requests (oldest first) that get the block for this step's
    token; the ones preempted for it drop out."""
    if st.kv_policy == "wait":
        return decodes
    for r in decodes:
        if st.live[r]:
            _ensure(st, r, st.ctx[r] + 1)
    return [r for r in decodes if st.live[r]]


def _whole_prompts(st: _Run, pending: list[int]) -> list[tuple]:
    """Whole prompts within the token budget (one over the budget alone)."""
    out, budget = [], st.max_tokens
    for r in pending:
        left = st.target[r] - st.done_pf[r]
        if out and left > budget:
            break
        out.append((r, left))
        budget -= left
    return out
