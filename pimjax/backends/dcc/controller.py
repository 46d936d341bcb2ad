"""One channel of DCC's Ramulator2 fork: HBM3-PIM controller, PIM scheduler, AllBankHBM3 refresh.

Sources: ``A/src/dram_controller/impl/hbm3_pim_controller.cpp`` (``tick`` l.114-193, ``send``),
``A/src/dram_controller/impl/scheduler/pim_scheduler.cpp`` (``compare`` l.32-56, ``get_best_request``
l.58-106), ``A/src/dram_controller/impl/refresh/all_bank_refresh_hbm3.cpp`` (l.28-57), ``A/src/dram/node.h``
(``check_ready`` / ``update_timing``), ``A/src/frontend/impl/memory_trace/pim_loadstore_trace.cpp`` (l.41-72,
the in-order frontend) and ``A/src/main.cpp`` (the tick loop; the reported count is
``memory_system_cycles``).  The HBM-PIM fork (``H/``) behaves the same on these paths.

DCC = SPIN-Research-Group/DCC @ 7ffb80e4f33e357177dc8ab148953c0484e1e322; ``A/`` = ``src/Ramulator2/AttAcc/``,
``H/`` = ``src/Ramulator2/HBMPIM/``.  Units: cycles are DRAM command-clock cycles of tCK = 0.769 ns
(HBM3 at 5.2 Gbps, ``A/src/dram/impl/HBM3-PIM.cpp`` l.304); addresses are bytes.

The simulation skips idle stretches (``Channel.next_event``), which does not change the cycle count.
"""
from collections import deque

from .timing import (
    CLOSING,
    CUSTOM_OPS,
    N_CH,
    N_PCH,
    NC,
    NO_TYPE,
    OPENING,
    READ_LATENCY,
    ROW_TYPE,
    SCOPE_L,
    TIMING_TABLE,
    C,
    T,
)
from .traces import REQ_FINAL, map_addr


# ----------------------------------------------------------------------------------------------
# One channel of the fork: HBM3PIMController + PIM scheduler + AllBankHBM3 refresh
# ----------------------------------------------------------------------------------------------
class Req:
    __slots__ = ("type", "final", "cmd", "addr", "av", "arrive", "depart", "nodes", "bank", "rl",
                 "rt_ver", "rt_cmd", "rt_val", "pq_ver", "pq_val")

    def __init__(self, typ, final, addr, av):
        self.type = typ
        self.final = final
        self.cmd = final
        self.addr = addr
        self.av = av
        self.arrive = -1
        self.depart = -1
        self.rl = None
        self.rt_ver = -1
        self.rt_cmd = -1
        self.rt_val = -1
        self.pq_ver = -1
        self.pq_val = -1
        if av[1] < 0:
            self.nodes = (0, av[1] if av[1] >= 0 else -1)
            self.bank = None
        else:
            p, r, g, b = av[1], av[2], av[3], av[4]
            rk = p * 2 + r
            bgi = rk * 4 + g
            self.nodes = (0, p, rk, bgi, bgi * 4 + b)
            self.bank = bgi * 4 + b


class Channel:
    MAX = 32          # ReqBuffer::max_size; enqueue() accepts while size <= max_size

    def __init__(self, fork, refresh=True):
        self.fork = fork
        cons = [[[] for _ in range(NC)] for _ in range(5)]
        win = [[0] * NC for _ in range(5)]
        for lvl, pre, fol, lat, w in TIMING_TABLE[fork]:
            for p in pre:
                for f in fol:
                    cons[lvl][C[p]].append((C[f], lat, w))
                    win[lvl][C[p]] = max(win[lvl][C[p]], w)
        self.cons = cons
        nn = [1, 2, 4, 16, 64]
        self.ready = [[[-1] * NC for _ in range(nn[l])] for l in range(5)]
        self.hist = [[[deque([-1] * win[l][c]) if win[l][c] else None for c in range(NC)] for _ in range(nn[l])] for l in range(5)]
        self.bank_open = [False] * 64
        self.bank_rows = [set() for _ in range(64)]
        self.state_ver = 0
        self.tver = 0
        self.log = None
        self.memo = {}
        self.clk = 0
        self.active, self.prio, self.read, self.write, self.pim = [], [], [], [], []
        self.pending = deque()
        self.write_mode = False
        self.is_pim = False
        self.next_ref = T["nREFI"] if refresh else 10 ** 15

    # ---------------- DRAM device (node.h) ----------------
    def ready_time(self, cmd, req):
        """Earliest clk at which check_ready(cmd) holds (node.h check_ready walks the path down to the
        command's scope), given the current timing state.  Memoised per timing version."""
        if req.rt_ver == self.tver and req.rt_cmd == cmd:
            return req.rt_val
        rl = req.rl
        if rl is None:
            nodes = req.nodes
            rl = req.rl = [self.ready[l][nodes[l]] for l in range(len(nodes))]
        sc = SCOPE_L[cmd]
        k = len(rl) if sc < 0 else min(len(rl), sc + 1)
        t = -1
        for i in range(k):
            v = rl[i][cmd]
            if v > t:
                t = v
        req.rt_ver = self.tver; req.rt_cmd = cmd; req.rt_val = t
        return t

    def check_ready(self, cmd, req):
        return self.clk >= self.ready_time(cmd, req)

    def issue(self, cmd, req):
        clk = self.clk
        self.tver += 1
        if self.log is not None:
            self.log.append((clk, cmd))
        nodes = req.nodes
        for lvl in range(len(nodes)):
            node = nodes[lvl]
            if node < 0:
                break
            h = self.hist[lvl][node][cmd]
            if h is not None:
                h.pop(); h.appendleft(clk)
            rd = self.ready[lvl][node]
            for f, lat, w in self.cons[lvl][cmd]:
                past = h[w - 1] if h is not None else clk
                if past < 0:
                    continue
                fut = past + lat
                if fut > rd[f]:
                    rd[f] = fut
        # update_states (actions)
        if cmd == C["ACT"]:
            b = req.bank
            self.bank_open[b] = True; self.bank_rows[b].add(req.av[5]); self.state_ver += 1
        elif cmd == C["PRE"]:
            b = req.bank
            self.bank_open[b] = False; self.bank_rows[b].clear(); self.state_ver += 1
        elif cmd == C["ACTAB"]:
            row = req.av[5]
            for b in range(64):
                self.bank_open[b] = True; self.bank_rows[b].add(row)
            self.state_ver += 1
        elif cmd == C["PREA"]:
            for b in range(64):
                self.bank_open[b] = False; self.bank_rows[b].clear()
            self.state_ver += 1

    def all_banks_row(self, row):
        key = (self.state_ver, row)
        r = self.memo.get(key)
        if r is None:
            r = -1
            for b in range(64):
                if not self.bank_open[b]:
                    r = C["ACTAB"]; break
                if row not in self.bank_rows[b]:
                    r = C["PREA"]; break
            if len(self.memo) > 4096:
                self.memo.clear()
            self.memo[key] = r
        return r

    def preq(self, req):
        if req.pq_ver == self.state_ver:
            return req.pq_val
        r = self._preq(req)
        req.pq_ver = self.state_ver; req.pq_val = r
        return r

    def _preq(self, req):
        f = req.final
        if f == C["REFab"]:
            return C["PREA"] if any(self.bank_open) else f
        if f == C["RD"] or f == C["WR"]:
            b = req.bank
            if not self.bank_open[b]:
                return C["ACT"]
            return f if req.av[5] in self.bank_rows[b] else C["PRE"]
        if f == C["MACAB"] or f in ALLBANK_OPS:
            r = self.all_banks_row(req.av[5])
            return f if r < 0 else r
        return f

    def rowhit(self, req):
        c = req.cmd
        if c in ROWHIT_CMDS and req.bank is not None:
            b = req.bank
            return self.bank_open[b] and req.av[5] in self.bank_rows[b]
        return False

    # ---------------- scheduler (pim_scheduler.cpp) ----------------
    def best(self, buf, is_pim_buf=False):
        """PIM::get_best_request (pim_scheduler.cpp l.58-106) + compare (l.32-56).
        A barrier at the head is dropped; behind a barrier only opening/closing commands compete; among
        the rest the first ready request wins (FCFS), except that a ready non-row-hit request does not
        overtake when another request in the buffer hits a row of the same bank."""
        if not buf:
            return None
        if buf is self.active:
            return self._best_general(buf)
        if is_pim_buf and buf[0].final == C["BARRIER"]:
            buf.pop(0)
            if not buf:
                return None
        clk = self.clk
        cand = buf[0]
        cand.cmd = self.preq(cand)
        if self.ready_time(cand.cmd, cand) <= clk:
            return cand
        hitbanks = None
        barrier = False
        for i in range(1, len(buf)):
            nx = buf[i]
            nx.cmd = self.preq(nx)
            if is_pim_buf and nx.final == C["BARRIER"]:
                barrier = True
            if barrier and not (nx.cmd in OPENING or nx.cmd in CLOSING):
                continue
            if self.ready_time(nx.cmd, nx) <= clk:
                if not self.rowhit(nx):
                    if hitbanks is None:
                        hitbanks = set()
                        for r in buf:
                            r.cmd = self.preq(r)
                            if self.rowhit(r):
                                hitbanks.add(r.bank)
                    if nx.bank in hitbanks:
                        continue
                return nx          # cand is ready now; nothing later can replace it
        return cand

    def _best_general(self, buf):
        """Exact pairwise compare() for buffers whose arrival order is not the list order (active buffer)."""
        clk = self.clk
        for r in buf:
            r.cmd = self.preq(r)
        hitbanks = {r.bank for r in buf if self.rowhit(r)}
        cand = buf[0]
        for nx in buf[1:]:
            r1 = self.ready_time(cand.cmd, cand) <= clk
            r2 = self.ready_time(nx.cmd, nx) <= clk
            if r1 != r2:
                if r1:
                    continue
                if not self.rowhit(nx) and nx.bank in hitbanks:
                    continue
                cand = nx
            elif nx.arrive < cand.arrive:
                cand = nx
        return cand

    def set_write_mode(self):
        if not self.write_mode:
            if len(self.write) > 0.8 * self.MAX or len(self.read) == 0:
                self.write_mode = True
        else:
            if len(self.write) < 0.2 * self.MAX and len(self.read) != 0:
                self.write_mode = False

    def closing_blocked(self, req):
        if req.cmd in CLOSING and self.active:
            rg = req.av[:5]
            for a in self.active:
                if a.av[:5] == rg:
                    return True
        return False

    def schedule(self):
        found = False
        buf = None
        req = None
        a = self.best(self.active)
        req = a                      # req_it is assigned even when it is end()
        if a is not None:
            if self.check_ready(a.cmd, a):
                found, buf = True, self.active
        if not found:
            if self.prio:
                buf = self.prio
                req = self.prio[0]
                req.cmd = self.preq(req)
                found = self.check_ready(req.cmd, req)
                if not found:
                    return False, None, req
            self.is_pim = False
            if not found:
                r = self.best(self.pim, True)
                req = r
                if r is not None:
                    found = self.check_ready(r.cmd, r)
                    buf = self.pim
                if found:
                    self.is_pim = True
            if not found:
                self.set_write_mode()
                b = self.write if self.write_mode else self.read
                r = self.best(b)
                req = r
                if r is not None:
                    found = self.check_ready(r.cmd, r)
                    buf = b
        if found and self.closing_blocked(req):
            found = False
        return found, buf, req

    def schedule_sec(self, first_cmd):
        def differs(c2):
            if first_cmd is None or first_cmd in NO_TYPE or c2 in NO_TYPE:
                return False
            return (first_cmd in ROW_TYPE) != (c2 in ROW_TYPE)
        found = False
        buf = None
        req = None
        a = self.best(self.active)
        if a is not None and self.check_ready(a.cmd, a) and differs(a.cmd):
            found, buf, req = True, self.active, a
        if not found:
            if self.prio:
                buf = self.prio
                req = self.prio[0]
                req.cmd = self.preq(req)
                if differs(req.cmd):
                    found = self.check_ready(req.cmd, req)
                    if not found:
                        return False, None, None
            self.is_pim = False
            if not found:
                r = self.best(self.pim, True)
                if r is not None and differs(r.cmd):
                    req = r
                    found = self.check_ready(r.cmd, r)
                    buf = self.pim
                if found:
                    self.is_pim = True
            if not found:
                self.set_write_mode()
                b = self.write if self.write_mode else self.read
                r = self.best(b)
                if r is not None and differs(r.cmd):
                    req = r
                    found = self.check_ready(r.cmd, r)
                    buf = b
        if found and self.closing_blocked(req):
            found = False
        return found, buf, req

    def _serve(self, req, buf):
        self.issue(req.cmd, req)
        if req.cmd == req.final:
            if req.final == C["RD"]:
                req.depart = self.clk + READ_LATENCY
                self.pending.append(req)
            buf.remove(req)
        else:
            if not self.is_pim and req.cmd in OPENING:
                self.active.append(req)
                buf.remove(req)

    def tick(self):
        """HBM3PIMController::tick (hbm3_pim_controller.cpp l.114-193). Returns True if anything happened."""
        self.clk += 1
        did = False
        if self.pending and self.pending[0].depart <= self.clk:
            self.pending.popleft(); did = True
        if self.clk == self.next_ref:                       # all_bank_refresh_hbm3.cpp l.40-57
            self.next_ref += T["nREFI"]
            for r in range(N_PCH):
                q = Req(C["REFab"], C["REFab"], -1, (0, r, -1, -1, -1, -1, -1))
                q.nodes = (0, r)
                self.prio.append(q)
            did = True
        npim0 = len(self.pim)
        found, buf, req = self.schedule()
        if found:
            self._serve(req, buf); did = True
        first_cmd = req.cmd if req is not None else None
        f2, b2, r2 = self.schedule_sec(first_cmd)
        if f2:
            self._serve(r2, b2); did = True
        if len(self.pim) != npim0:
            did = True
        return did

    def busy(self):
        return bool(self.active or self.prio or self.read or self.write or self.pim or self.pending)

    def next_event(self):
        """Earliest future clk at which a currently-blocked request could become ready."""
        t = self.next_ref
        if self.pending:
            t = min(t, self.pending[0].depart)
        for buf in (self.active, self.prio, self.pim, self.read, self.write):
            for r in buf:
                if r.final == C["BARRIER"]:
                    return self.clk + 1
                rt = self.ready_time(self.preq(r), r)
                if rt < t:
                    t = rt
        return max(t, self.clk + 1)

    # ---------------- controller send() ----------------
    def send(self, req):
        f = req.final
        if f == C["BARRIER"]:
            if self.active or self.pim or self.read or self.write:
                return False
        if f == C["RD"]:
            for w in self.write:
                if w.addr == req.addr:
                    req.depart = self.clk + 1
                    self.pending.append(req)
                    return True
        req.arrive = self.clk
        if f == C["RD"]:
            b = self.read
        elif f == C["WR"]:
            b = self.write
        else:
            b = self.pim
        if len(b) <= self.MAX:
            b.append(req)
            return True
        return False


ALLBANK_OPS = {C[n] for n in CUSTOM_OPS + ["WB_ACC", "WB_RES", "RELU"]}
ROWHIT_CMDS = {C[n] for n in ["RD", "WR", "MACAB", "MACSB", "MACPB"] + CUSTOM_OPS + ["WB_ACC", "WB_RES", "RELU"]}


def channel_requests(trace, ch):
    """The requests of ``trace`` that map to physical channel ``ch``, in trace order."""
    out = []
    for name, addr in trace:
        av = map_addr(addr)
        if av[0] != ch:
            continue
        fin = C[REQ_FINAL[name]]
        out.append(Req(name, fin, addr, av))
    return out


def simulate_channel(fork, reqs, max_cycles=10 ** 8, detail=None, refresh=True):
    """main.cpp loop: frontend.tick(); memory_system.tick(); stop when trace sent and nothing pending.
    Returns memory_system_cycles (cycles of tCK = 0.769 ns) of one channel replaying ``reqs``.
    If detail is a dict, it receives the issued-command log
    [(clk, command)] and the clk at which each barrier was accepted.  ``refresh=False`` switches
    AllBankHBM3 refresh off (to measure what it costs; the artifact always refreshes)."""
    ch = Channel(fork, refresh)
    if detail is not None:
        ch.log = detail.setdefault("log", [])
        bars = detail.setdefault("barriers", [])
    i = 0
    n = len(reqs)
    while True:
        sent = False
        while i < n:
            if ch.send(reqs[i]):
                if detail is not None and reqs[i].final == C["BARRIER"]:
                    bars.append((i, ch.clk))
                i += 1; sent = True
            else:
                break
        did = ch.tick()
        if i >= n and not ch.busy():
            return ch.clk
        if not did and not sent:
            # nothing changed this cycle: jump to the next time something can become ready
            nxt = ch.next_event()
            if nxt - 1 > ch.clk:
                ch.clk = nxt - 1
        if ch.clk > max_cycles:
            raise RuntimeError("runaway")


def simulate_coupled(fork, trace, max_cycles=10 ** 8, refresh=True):
    """All 16 channels behind the one in-order frontend (exact coupling; ~16x slower).  The frontend sends
    trace entries in order while the target controller accepts them (pim_loadstore_trace.cpp l.41-72);
    every controller ticks each cycle (PIM_DRAM_system.cpp l.133-139).  Returns memory_system_cycles
    (cycles of tCK = 0.769 ns)."""
    chans = [Channel(fork, refresh) for _ in range(N_CH)]
    reqs = []
    for name, addr in trace:
        av = map_addr(addr)
        reqs.append((av[0], Req(name, C[REQ_FINAL[name]], addr, av)))
    i, n = 0, len(reqs)
    clk = 0
    while True:
        sent = False
        while i < n:
            c, r = reqs[i]
            if chans[c].send(r):
                i += 1; sent = True
            else:
                break
        did = False
        for ch in chans:
            did |= ch.tick()
        clk += 1
        if i >= n and not any(ch.busy() for ch in chans):
            return clk
        if not did and not sent:
            nxt = min(ch.next_event() for ch in chans)
            if nxt - 1 > clk:
                clk = nxt - 1
                for ch in chans:
                    ch.clk = clk
        if clk > max_cycles:
            raise RuntimeError("runaway")
