package store

// heldBy is the rule of holders (records.JobNow.Hold) in SQL, for the
// grouped statements that apply calls without reading their jobs first:
// it holds of the jobs row j exactly where Hold says records.Held. worker,
// attempt and delivery are the SQL expressions of the caller's: worker
// the empty text for an admin, attempt 0 or delivery NULL when not given,
// delivery the token as deliveryParam lays it out (tokens compare as
// UUIDs);
// attempt itself empty for calls that never name one. held_test.go runs
// every case through both.
func heldBy(worker, attempt, delivery string) string {
	cond := `(j.status = 'running' AND NOT j.cancel_requested AND (` + worker + ` = '' OR j.worker_id = ` + worker + `)` +
		` AND (` + delivery + ` IS NULL OR j.delivery::text = ` + delivery + `)`
	if attempt != "" {
		cond += ` AND (` + attempt + ` = 0 OR j.attempt = ` + attempt + `)`
	}
	return cond + `)`
}
