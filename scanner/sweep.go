package scanner

import "go.uber.org/zap"

// The sweep after a reconnect. A process's due board learns each shard's
// next work from claim replies and wake-up notices; both can be lost when
// Redis goes away. A notice published while the Pub/Sub subscription
// reconnects never arrives, and a shard the board handed out is off the
// board until its claim replies, so a claim that failed takes the shard's
// head with it. Before the sweep, such a shard waited for the patrol (one
// shard a PatrolInterval per process, from the shared cursor): with M = 16
// and two processes, messages due seconds after a Redis restart were
// published up to 8 s late, all at once, while every other shard was on
// time.
//
// So whenever this process has reason to think it missed something, it
// puts every shard it takes the wake-ups of (affinity.go) on its board as
// due now, and its idle goroutines claim each one in the next dispatch
// rounds; each claim's reply brings back the shard's real head. It does so
//
//   - when the wake-up subscription was made again (shard.Notice's
//     Resubscribed: Redis restarted or failed over, or the connection
//     broke), and
//   - when a claim succeeds after a claim failed (Redis answers again).
//
// The work is bounded: one claim per shard the process covers, per
// reconnect, at most M claims for the fleet when the membership is known
// (each process sweeps its own shards) and M per process while it is not
// (each takes every shard then). A claim is cheap next to the lateness it
// saves, and a reconnect is rare.

// sweep puts every shard this process takes the wake-ups of on the due
// board as due now, and says why in the log.
func (s *Scanner) sweep(why string) {
	hw, err := s.d.Shards.HighWater()
	if err != nil {
		s.errLog.warn("sweep the shards after a reconnect; the patrol finds their heads", err)
		return
	}
	n := 0
	for i := range hw {
		if s.aff.owns(i) {
			s.board.notice(i, 0)
			n++
		}
	}
	s.log.Info("sweeping the shards: heads may have been missed", zap.String("why", why), zap.Int("shards", n))
}

// claimOutcome records whether a visit's claims failed, and sweeps at the
// first that succeeds after a failure.
func (s *Scanner) claimOutcome(err error) {
	if err != nil {
		s.claimsFailing.Store(true)
		return
	}
	if s.claimsFailing.Load() && s.claimsFailing.CompareAndSwap(true, false) {
		s.sweep("claims succeed again after failing")
	}
}

// recovered counts the messages of lost claims that the claimer put back
// as due (claimer.recover), and warns when presenting the receipts failed
// (they are kept and presented again before the next round trip).
func (s *Scanner) recovered(n int, err error) {
	if n > 0 {
		s.d.Metrics.Recovered.Add(float64(n))
		s.log.Info("claims whose replies were lost are due again", zap.Int("messages", n))
	}
	if err != nil {
		s.errLog.warn("recover claims whose replies were lost; trying again before the next claims", err)
	}
}
