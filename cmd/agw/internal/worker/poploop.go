package worker

import (
	"strings"
)

// popLoop takes jobs one at a time with "BRPOP queue:<a> queue:<b> …
// <timeout>" (queues in priority order) and runs each to the end before
// popping again, until popping stops (shutdown or drain; see stopPop).
func (w *Worker) popLoop(n int) {
	log := w.log.With().Int("loop", n).Logger()
	keys := make([]string, len(w.cfg.Queues))
	for i, q := range w.cfg.Queues {
		keys[i] = "queue:" + q
	}
	b := w.newBackoff()
	for w.popCtx.Err() == nil {
		if err := w.ensureRegistered(w.popCtx); err != nil {
			return
		}
		res, err := w.pop.BRPop(w.popCtx, w.cfg.PopTimeout, keys...).Result()
		switch classify(err) {
		case outcomeOK:
			b.Reset()
			if len(res) != 2 {
				log.Error().Strs("reply", res).Msg("BRPOP reply is not [queue, job]")
				continue
			}
			w.runJob(strings.TrimPrefix(res[0], "queue:"), res[1])
			continue
		case outcomeNil:
			b.Reset()
			continue
		case outcomeNotRegistered:
			w.markStale()
		case outcomeConn:
			if w.popCtx.Err() != nil {
				return
			}
			w.markStale()
		}
		wait := b.Next()
		log.Warn().Err(err).Dur("retry_in", wait).Msg("BRPOP failed")
		if !sleep(w.popCtx, wait) {
			return
		}
	}
}
