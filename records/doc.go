// Package records holds the records every layer of agq shares — jobs,
// steps, workers, queues, schedules — with their statuses, limits and
// refusals. The store returns them, the engine decides with them and the
// wire layer encodes them; nothing copies them. It imports no package of
// agq and no driver.
package records
