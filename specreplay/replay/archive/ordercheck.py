"""Cross-row validation: order, duplicates and constancy rules of schema v1, as a state machine.

See docs/inputs.md#position-traces-schema-v1.

Rows arrive in archive order. The machine keeps the state of the current round (its first row, the
positions seen) and, per request code, the last round seen with its location and the request's
family, so memory grows with the number of requests, never with the archive.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay import use_numba_cache

__all__ = ["MAX_POSITION", "ORDER_RULES", "Carry", "check_order"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

MAX_POSITION: Final[int] = 1024
"""Largest draft position accepted (arms go to depth 127)."""

(
    OK,
    POS_LT1,
    POS_BIG,
    ROUND_NEG,
    CTX_NEG,
    POS_START,
    POS_DUP,
    POS_GAP,
    CTX_VARIES,
    FAM_CHANGES,
    ACC_AFTER_FALSE,
    ROUND_ORDER,
    ROUND_SPLIT,
    ROUND_SPLIT_FILES,
) = range(14)

ORDER_RULES: Final[dict[int, str]] = {
    POS_LT1: "position < 1 (positions start at 1)",
    POS_BIG: f"position > {MAX_POSITION}",
    ROUND_NEG: "round < 0 (rounds count from 0)",
    CTX_NEG: "context_tokens < 0",
    POS_START: "round does not start at position 1",
    POS_DUP: "duplicate (request_id, round, position)",
    POS_GAP: "positions out of order or with a gap inside a round",
    CTX_VARIES: "context_tokens varies within a round",
    FAM_CHANGES: "request changes family",
    ACC_AFTER_FALSE: "accepted True after a False in the same round",
    ROUND_ORDER: "round out of order (a request's rounds must increase)",
    ROUND_SPLIT: "round's rows are not contiguous",
    ROUND_SPLIT_FILES: "round split across files",
}

# slots of the carry vector
C_PREV_REQ, C_PREV_ROUND, C_PREV_POS, C_CTX, C_FAM, C_FALSE_FILE, C_FALSE_LOC = range(7)
C_START_FILE, C_START_LOC, C_MAXPOS = 7, 8, 9
_N_CARRY = 10


class Carry:
    """Mutable state of :func:`check_order` between chunks (arrays grow with request codes)."""

    def __init__(self) -> None:
        self.scalars = np.full(_N_CARRY, -1, dtype=np.int64)
        self.pos_file = np.full(MAX_POSITION + 1, -1, dtype=np.int64)
        self.pos_loc = np.full(MAX_POSITION + 1, -1, dtype=np.int64)
        self.req = np.full((0, 6), -1, dtype=np.int64)

    def new_file(self) -> None:
        """Forget the current round: a round never continues into the next file."""
        self.scalars[C_PREV_REQ] = -1

    def ensure(self, n_requests: int) -> None:
        """Grow the per-request table to hold ``n_requests`` codes."""
        if self.req.shape[0] < n_requests:
            grown = np.full((max(n_requests, 2 * self.req.shape[0]), 6), -1, dtype=np.int64)
            grown[: self.req.shape[0]] = self.req
            self.req = grown


# per-request table columns
R_LAST_ROUND, R_LAST_FILE, R_LAST_LOC, R_FAM, R_FAM_FILE, R_FAM_LOC = range(6)


@njit(cache=True)
def check_order(
    req: NDArray[np.int64],
    rnd: NDArray[np.int64],
    pos: NDArray[np.int64],
    ctx: NDArray[np.int64],
    fam: NDArray[np.int64],
    acc: NDArray[np.int8],
    locs: NDArray[np.int64],
    after_drop: NDArray[np.bool_],
    file_idx: int,
    carry: NDArray[np.int64],
    pos_file: NDArray[np.int64],
    pos_loc: NDArray[np.int64],
    reqtab: NDArray[np.int64],
    code: NDArray[np.int8],
    cite_file: NDArray[np.int64],
    cite_loc: NDArray[np.int64],
) -> None:
    """Run the order/duplicate/constancy state machine over one chunk's rows, in order.

    Parameters
    ----------
    req, rnd, pos, ctx, fam : int64, shape (n,)
        Request code, round, position, context_tokens, family code of each row.
    acc : int8, shape (n,)
        accepted as 1/0, or −1 everywhere when the archive has no such column.
    locs : int64, shape (n,)
        Row/line location of each row (for citations).
    after_drop : bool, shape (n,)
        True where a row dropped for a bad value came just before: position continuity is then
        not checked, so one bad row causes one error.
    file_idx : int
        Index of the chunk's file in the archive.
    carry : int64, shape (10,)
        State of the current round (updated in place).
    pos_file, pos_loc : int64, shape (MAX_POSITION + 1,)
        Where each position of the current round was seen (updated in place).
    reqtab : int64, shape (n_requests, 6)
        Per-request last round, its location, and the request's family with its first location.
    code : int8, shape (n,)
        Output: 0 or the rule violated by the row (see ``ORDER_RULES``).
    cite_file, cite_loc : int64, shape (n,)
        Output: the earlier row the message cites (−1 when none).
    """
    n = req.shape[0]
    for i in range(n):
        code[i] = OK
        cite_file[i] = -1
        cite_loc[i] = -1
        r = req[i]
        p = pos[i]
        if p < 1:
            code[i] = POS_LT1
            continue
        if p > MAX_POSITION:
            code[i] = POS_BIG
            continue
        if rnd[i] < 0:
            code[i] = ROUND_NEG
            continue
        if ctx[i] < 0:
            code[i] = CTX_NEG
            continue
        same_round = carry[C_PREV_REQ] == r and carry[C_PREV_ROUND] == rnd[i]
        if not same_round:
            # a new round: reset its state (also when it is itself misplaced, so that its later
            # rows are checked against it and not reported again)
            for q in range(max(carry[C_MAXPOS], 0) + 1):
                pos_file[q] = -1
            carry[C_MAXPOS] = 0
            carry[C_PREV_REQ] = r
            carry[C_PREV_ROUND] = rnd[i]
            carry[C_PREV_POS] = 0
            carry[C_CTX] = ctx[i]
            carry[C_FAM] = fam[i]
            carry[C_FALSE_FILE] = -1
            carry[C_FALSE_LOC] = -1
            carry[C_START_FILE] = file_idx
            carry[C_START_LOC] = locs[i]
            last = reqtab[r, R_LAST_ROUND]
            if last >= 0 and rnd[i] <= last:
                cite_file[i] = reqtab[r, R_LAST_FILE]
                cite_loc[i] = reqtab[r, R_LAST_LOC]
                if rnd[i] < last:
                    code[i] = ROUND_ORDER
                elif reqtab[r, R_LAST_FILE] != file_idx:
                    code[i] = ROUND_SPLIT_FILES
                else:
                    code[i] = ROUND_SPLIT
            else:
                reqtab[r, R_LAST_ROUND] = rnd[i]
                reqtab[r, R_LAST_FILE] = file_idx
                reqtab[r, R_LAST_LOC] = locs[i]
        # position bookkeeping happens for every row, so one bad row causes one error
        prev = carry[C_PREV_POS]
        dup = pos_file[p] >= 0
        if dup:
            dup_file = pos_file[p]
            dup_loc = pos_loc[p]
        else:
            pos_file[p] = file_idx
            pos_loc[p] = locs[i]
        carry[C_PREV_POS] = p
        carry[C_MAXPOS] = max(carry[C_MAXPOS], p)
        if code[i] != OK:
            continue
        # family is fixed per request
        if reqtab[r, R_FAM] < 0:
            reqtab[r, R_FAM] = fam[i]
            reqtab[r, R_FAM_FILE] = file_idx
            reqtab[r, R_FAM_LOC] = locs[i]
        elif reqtab[r, R_FAM] != fam[i]:
            code[i] = FAM_CHANGES
            cite_file[i] = reqtab[r, R_FAM_FILE]
            cite_loc[i] = reqtab[r, R_FAM_LOC]
            continue
        if dup:
            code[i] = POS_DUP
            cite_file[i] = dup_file
            cite_loc[i] = dup_loc
            continue
        if p != prev + 1 and not after_drop[i]:
            code[i] = POS_START if prev == 0 else POS_GAP
            cite_loc[i] = prev  # the position it follows, not a row
            continue
        if ctx[i] != carry[C_CTX]:
            code[i] = CTX_VARIES
            cite_file[i] = carry[C_START_FILE]
            cite_loc[i] = carry[C_START_LOC]
            continue
        if acc[i] == 0 and carry[C_FALSE_LOC] < 0:
            carry[C_FALSE_FILE] = file_idx
            carry[C_FALSE_LOC] = locs[i]
        elif acc[i] == 1 and carry[C_FALSE_LOC] >= 0:
            code[i] = ACC_AFTER_FALSE
            cite_file[i] = carry[C_FALSE_FILE]
            cite_loc[i] = carry[C_FALSE_LOC]
