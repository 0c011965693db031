/* The handoff protocol (docs/handoff-states.md), model-checked with spin.
 *
 * One decode page is handed off NH times in a row: handoff 1, then handoff 2
 * reuses the very same page — the reuse that a late write would corrupt.
 * The transport is the one src/transfer/transport.h promises: messages are
 * ordered among themselves, puts land whenever the network likes (before or
 * after later messages), a flush either confirms that every put landed or
 * fails (times out), and a closed endpoint delivers no more writes. The
 * connection can die at any moment (peer death), and then comes back (a
 * reconnect: a new epoch). Deadlines are nondeterministic choices: they may
 * fire at any time.
 *
 * Checked (safety run: assertions and invalid end states):
 *   - a put lands only in a page its own handoff still owns (no page is
 *     reused while a put into it can still land);
 *   - a Commit is acted on only after every put of its handoff landed;
 *   - every handoff reaches exactly one terminal state on each side;
 *   - no deadlock, and quarantine always ends (the decode side finishes every
 *     handoff: a quarantine that never ended would block it).
 *
 * Variants that must FAIL (the checker must be able to fail):
 *   -DBROKEN_ACK_AFTER_FAILED_FLUSH  the sender acknowledges an abort (or
 *                                    reports a failure) after a flush that
 *                                    did not confirm: the bug fixed in
 *                                    PrefillWorker::FinishFailed;
 *   -DBROKEN_EARLY_COMMIT            the Commit goes out before the flush
 *                                    (the production incident).
 */

#define NH 2     /* handoffs, one after another, into the same page */
#define NPUTS 2  /* page writes per handoff */

mtype = { DEST, COMMIT, ABORT, ACK };
chan d2p = [4] of { mtype, byte };
chan p2d = [4] of { mtype, byte };

byte owner = 0;           /* handoff holding the decode page; 0: free */
byte inflight[NH + 1];    /* puts posted and not landed, per handoff */
bool closed = false;      /* the connection's endpoints are closed */
byte epoch = 0;           /* connections so far (a reconnect is a new one) */
byte d_end[NH + 1];       /* terminal states reached, decode side */
byte p_end[NH + 1];       /* terminal states reached, prefill side */
byte p_got[NH + 1];       /* destinations the prefill side received */
bool d_done = false;

/* Closing is the fence: in-flight puts can no longer land, and whatever the
 * connection still carried is gone with it. */
inline close_link() {
  atomic {
    if
    :: !closed ->
      closed = true;
      inflight[1] = 0;
      inflight[2] = 0;
      do
      :: nempty(d2p) -> d2p?_, _
      :: empty(d2p) -> break
      od;
      do
      :: nempty(p2d) -> p2d?_, _
      :: empty(p2d) -> break
      od
    :: else -> skip
    fi
  }
}

/* Sends on the current connection, if it is still open and is the one the
 * sender means (my_epoch); otherwise the message is lost, as on a closed endpoint. */
inline send(ch, m, id, my_epoch) {
  atomic {
    if
    :: !closed && my_epoch == epoch -> ch!m, id
    :: else -> skip
    fi
  }
}

active proctype Network() {
end:
  do
  :: atomic { !closed && inflight[1] > 0 -> assert(owner == 1); inflight[1]-- }
  :: atomic { !closed && inflight[2] > 0 -> assert(owner == 2); inflight[2]-- }
  od
}

/* Peer death, at most once, at any moment. */
active proctype Killer() {
  if
  :: close_link()
  :: skip
  fi
}

active proctype Prefill() {
  byte h, k, e;
  bool aborted, fenced;
end_idle:
  do
  :: atomic { d2p?DEST, h -> e = epoch; p_got[h]++ };
    aborted = false;
    k = 0;
    do
    :: atomic { k < NPUTS && !aborted && !closed && e == epoch -> inflight[h]++ }; k++
    :: d2p?ABORT, eval(h) -> aborted = true
    :: k == NPUTS || aborted || closed || e != epoch -> break
    od;
#ifdef BROKEN_EARLY_COMMIT
    if
    :: !aborted -> send(p2d, COMMIT, h, e)
    :: else -> skip
    fi;
#endif
    /* Flush: confirms only when every put of this handoff landed; may time out. */
    if
    :: atomic { !closed && e == epoch && inflight[h] == 0 -> fenced = true }
    :: fenced = false
    fi;
    if
    :: closed || e != epoch -> skip  /* the connection is gone: nothing to tell */
    :: else ->
      if
#ifndef BROKEN_EARLY_COMMIT
      :: fenced && !aborted -> send(p2d, COMMIT, h, e)
#else
      :: fenced && !aborted -> skip
#endif
      :: fenced && aborted -> send(p2d, ACK, h, e)
#ifdef BROKEN_ACK_AFTER_FAILED_FLUSH
      :: !fenced && aborted -> send(p2d, ACK, h, e)
      :: !fenced && !aborted -> send(p2d, ABORT, h, e)
#else
      :: !fenced -> close_link()  /* cannot prove the writes landed: never acknowledge */
#endif
      fi
    fi;
    assert(p_end[h] == 0);
    p_end[h]++
  :: d2p?ABORT, h -> send(p2d, ACK, h, epoch)  /* not running: nothing of it in flight */
  od
}

#define WAITING 0
#define QUARANTINED 1

active proctype Decode() {
  byte h = 1, m, st, e;
  do
  :: h > NH -> break
  :: h <= NH ->
    atomic { owner == 0 -> owner = h; e = epoch };  /* reserve the page */
    send(d2p, DEST, h, e);
    st = WAITING;
    do
    :: p2d?COMMIT, m ->
      if
      :: m == h && st == WAITING ->
        assert(inflight[h] == 0);  /* commit after all bytes */
        d_end[h]++;
        break
      :: m == h && st == QUARANTINED -> break  /* follows the sender's flush: as good as an ack */
      :: else -> skip                           /* a stale message of an earlier handoff */
      fi
    :: p2d?ACK, m ->
      if
      :: m == h && st == QUARANTINED -> break
      :: else -> skip
      fi
    :: p2d?ABORT, m ->
      if
      :: m == h && st == WAITING -> d_end[h]++; break  /* the sender failed it, after its flush */
      :: m == h && st == QUARANTINED -> break
      :: else -> skip
      fi
    :: st == WAITING ->  /* the deadline fires, or the client hangs up */
      send(d2p, ABORT, h, e);
      st = QUARANTINED;
      d_end[h]++
    :: st == QUARANTINED -> close_link()  /* quarantine deadline: close the link (the fence) */
    :: closed ->
      if
      :: st == WAITING -> d_end[h]++
      :: else -> skip
      fi;
      break
    od;
    owner = 0;  /* free the page (a committed one after its request is done) */
    if
    :: closed -> atomic { epoch++; closed = false }  /* reconnect */
    :: else -> skip
    fi;
    h++
  od;
  assert(d_end[1] == 1 && d_end[2] == 1);
  d_done = true
}

/* At the end, both sides ended every handoff the prefill side received once. */
active proctype Accounting() {
  atomic {
    d_done && empty(d2p) && Prefill@end_idle ->
    assert(p_end[1] == p_got[1] && p_end[2] == p_got[2] && p_got[1] <= 1 && p_got[2] <= 1)
  }
}
