/* The handoff protocol (docs/handoff-fence.md), model-checked with spin.
 *
 * One decode page is handed off NH times in a row: handoff 1, then handoff 2
 * reuses the very same page — the reuse a late write would corrupt.
 *
 * The transport is the weakest one tandem runs on (UCX over shared memory):
 *   - messages are ordered among themselves; puts land whenever the network
 *     likes, before or after later messages;
 *   - a flush either confirms that every put of the handoff landed, or fails;
 *   - each end of a connection closes on its own. The DECODE side closing its
 *     end does NOT stop the prefill's puts (over shared memory the prefill
 *     writes into our memory itself); only the PREFILL side closing its end
 *     does (its endpoint is gone). The prefill notices a decode-side close
 *     eventually, at any moment;
 *   - the connection may die once at any moment (peer death);
 *   - reconnecting makes a new connection (an epoch) with its own handshake.
 * Deadlines and the peer timeout are nondeterministic: they may fire at any time.
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
 *                                    reports a failure) after a flush that did
 *                                    not confirm (fixed in PrefillEngine::OnEnd);
 *   -DBROKEN_EARLY_COMMIT            the Commit goes out before the flush (the incident);
 *   -DBROKEN_FREE_ON_OWN_CLOSE       the decode side frees the pages of a live peer
 *                                    as soon as it closed its own end (fixed in
 *                                    RemotePrefill::LinkDown: they wait for the fence).
 */

#define NH 2     /* handoffs, one after another, into the same page */
#define NPUTS 2  /* page writes per handoff */
#define NE 4     /* connections (epochs) at most */

mtype = { HELLO, DEST, COMMIT, ABORT, ACK };
chan d2p = [4] of { mtype, byte, byte };  /* type, handoff, epoch */
chan p2d = [4] of { mtype, byte, byte };

byte owner = 0;           /* handoff holding the decode page; 0: free */
byte inflight[NH + 1];    /* puts posted and not landed, per handoff */
byte put_epoch[NH + 1];   /* the connection a handoff's puts travel on */
bool d_closed[NE];        /* the decode side closed its end of connection e */
bool p_closed[NE];        /* the prefill side's end of e is gone: its puts on e stop */
byte epoch = 0;           /* the decode side's current connection */
byte d_end[NH + 1];       /* terminal states reached, decode side */
byte p_end[NH + 1];       /* terminal states reached, prefill side */
byte p_got[NH + 1];       /* destinations the prefill side took */
bool d_done = false;

/* The prefill side's end of connection e goes (its close, its death, or its
 * noticing ours): nothing it posted on e lands after this. */
inline p_close(e) {
  atomic {
    p_closed[e] = true;
    if
    :: put_epoch[1] == e -> inflight[1] = 0
    :: else -> skip
    fi;
    if
    :: put_epoch[2] == e -> inflight[2] = 0
    :: else -> skip
    fi
  }
}

inline p_send(m, h, e) {
  atomic {
    if
    :: !p_closed[e] -> p2d!m, h, e
    :: else -> skip
    fi
  }
}

inline d_send(m, h) {
  atomic {
    if
    :: !d_closed[epoch] -> d2p!m, h, epoch
    :: else -> skip
    fi
  }
}

active proctype Network() {
end:
  do
  :: atomic { inflight[1] > 0 && !p_closed[put_epoch[1]] -> assert(owner == 1); inflight[1]-- }
  :: atomic { inflight[2] > 0 && !p_closed[put_epoch[2]] -> assert(owner == 2); inflight[2]-- }
  /* The prefill side notices, at some moment, that the decode side closed. */
  :: atomic { d_closed[0] && !p_closed[0] -> p_close(0) }
  :: atomic { d_closed[1] && !p_closed[1] -> p_close(1) }
  :: atomic { d_closed[2] && !p_closed[2] -> p_close(2) }
  :: atomic { d_closed[3] && !p_closed[3] -> p_close(3) }
  od
}

/* Peer death, at most once, at any moment: the current connection's prefill end goes. */
active proctype Killer() {
  if
  :: atomic { !p_closed[epoch] -> p_close(epoch) }
  :: skip
  fi
}

active proctype Prefill() {
  byte h, k, e;
  bool aborted, fenced;
end_idle:
  do
  /* Idle, so no handoff of an earlier connection still runs: the answer
   * promises that nothing of one still lands. */
  :: d2p?HELLO, _, e -> p_send(HELLO, 0, e)
  :: d2p?ABORT, h, e -> p_send(ACK, h, e)  /* not running: nothing of it in flight */
  :: atomic { d2p?DEST, h, e -> p_got[h]++; put_epoch[h] = e };
    aborted = false;
    k = 0;
    do
    :: atomic { k < NPUTS && !aborted && !p_closed[e] -> inflight[h]++ }; k++
    :: d2p?ABORT, eval(h), eval(e) -> aborted = true
    :: k == NPUTS || aborted || p_closed[e] -> break
    od;
#ifdef BROKEN_EARLY_COMMIT
    if
    :: !aborted -> p_send(COMMIT, h, e)
    :: else -> skip
    fi;
#endif
    /* Flush: confirms only when every put of this handoff landed; may time out. */
    if
    :: atomic { !p_closed[e] && inflight[h] == 0 -> fenced = true }
    :: fenced = false
    fi;
    if
    :: p_closed[e] -> skip  /* the connection is gone: nothing to tell */
    :: else ->
      if
#ifndef BROKEN_EARLY_COMMIT
      :: fenced && !aborted -> p_send(COMMIT, h, e)
      :: fenced && !aborted -> p_send(ABORT, h, e)  /* it failed (a compute error, its budget), writes fenced */
#else
      :: fenced && !aborted -> skip
#endif
      :: fenced && aborted -> p_send(ACK, h, e)
#ifdef BROKEN_ACK_AFTER_FAILED_FLUSH
      :: !fenced && aborted -> p_send(ACK, h, e)
      :: !fenced && !aborted -> p_send(ABORT, h, e)
#else
      :: !fenced -> p_close(e)  /* cannot prove the writes landed: never acknowledge, close */
#endif
      fi
    fi;
    assert(p_end[h] == 0);
    p_end[h]++
  od
}

#define WAITING 0
#define QUARANTINED 1

active proctype Decode() {
  byte h = 1, m, e, st;
  bool up = false, suspended = false, gone = false;
  do
  :: h > NH -> break
  :: h <= NH ->
    /* A usable link: a handshake answered on the current connection. */
    do
    :: up -> break
    :: !up ->
      d_send(HELLO, 0);
      do
      :: p2d?HELLO, _, e ->
        if
        :: e == epoch && !d_closed[epoch] -> up = true; break
        :: else -> skip  /* an answer on a connection given up */
        fi
      :: p2d?COMMIT, _, _  /* stale messages of given-up connections */
      :: p2d?ACK, _, _
      :: p2d?ABORT, _, _
      :: atomic { p_closed[epoch] && epoch < NE - 1 -> epoch++ }; break  /* it died: reconnect */
      od;
      if
      :: up && suspended -> owner = 0; suspended = false  /* the answer is the fence */
      :: else -> skip
      fi
    od;
    atomic { owner == 0 -> owner = h };  /* reserve the page */
    d_send(DEST, h);
    st = WAITING;
    gone = false;
    do
    :: p2d?COMMIT, m, e ->
      if
      :: m == h && e == epoch && st == WAITING ->
        assert(inflight[h] == 0);  /* commit after all bytes */
        d_end[h]++;
        break
      :: m == h && e == epoch && st == QUARANTINED -> break  /* follows the sender's flush: as good as an ack */
      :: else -> skip  /* stale */
      fi
    :: p2d?ACK, m, e ->
      if
      :: m == h && e == epoch && st == QUARANTINED -> break
      :: else -> skip
      fi
    :: p2d?ABORT, m, e ->
      if
      :: m == h && e == epoch && st == WAITING -> d_end[h]++; break  /* failed by the sender, after its flush */
      :: m == h && e == epoch && st == QUARANTINED -> break
      :: else -> skip
      fi
    :: p2d?HELLO, _, _  /* stale */
    :: st == WAITING ->  /* the deadline fires, or the client hangs up */
      d_send(ABORT, h);
      st = QUARANTINED;
      d_end[h]++
    /* The peer timeout or the quarantine deadline: we close our end of a
     * peer that may be alive. Its writes may still land. */
    :: epoch < NE - 1 ->
      d_closed[epoch] = true;
      if
      :: st == WAITING -> d_end[h]++
      :: else -> skip
      fi;
      suspended = true;
      break
    /* The peer's end is gone (it closed or died): nothing of it lands any more. */
    :: p_closed[epoch] && !d_closed[epoch] ->
      if
      :: st == WAITING -> d_end[h]++
      :: else -> skip
      fi;
      gone = true;
      break
    od;
    if
    :: suspended ->
#ifdef BROKEN_FREE_ON_OWN_CLOSE
      owner = 0; suspended = false;
#endif
      up = false;
      epoch++  /* reconnect; the pages wait for the new handshake */
    :: gone ->
      owner = 0;  /* freed: the peer's end is gone */
      up = false;
      if
      :: epoch < NE - 1 -> epoch++
      :: else -> skip
      fi
    :: else -> owner = 0  /* committed (the request finishes), acknowledged or failed */
    fi;
    h++
  od;
  /* The last handoff's pages, if suspended, wait for a handshake too. */
  do
  :: !suspended -> break
  :: suspended ->
    d_send(HELLO, 0);
    do
    :: p2d?HELLO, _, e ->
      if
      :: e == epoch -> owner = 0; suspended = false; break
      :: else -> skip
      fi
    :: p2d?COMMIT, _, _
    :: p2d?ACK, _, _
    :: p2d?ABORT, _, _
    :: atomic { p_closed[epoch] && epoch < NE - 1 -> epoch++ }; break
    od
  od;
  assert(d_end[1] == 1 && d_end[2] == 1);
  d_done = true
}

/* At the end, the prefill side ended each handoff it took exactly once. */
active proctype Accounting() {
  atomic {
    d_done && empty(d2p) && Prefill@end_idle ->
    assert(p_end[1] == p_got[1] && p_end[2] == p_got[2] && p_got[1] <= 1 && p_got[2] <= 1)
  }
}
