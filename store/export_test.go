package store

// HeldBy is heldBy, for the test that holds it to the rule it stands for.
var HeldBy = heldBy

// DeliveryParam is deliveryParam, for the same test.
var DeliveryParam = deliveryParam

// StepBeginDecisionSQL and StepCompletesSQL are the rules of step calls in
// SQL, for the test that holds them to the engine's.
var (
	StepBeginDecisionSQL = stepBeginDecisionSQL
	StepCompletesSQL     = stepCompletesSQL
)

// The statements of step calls, for the test that plans them.
var (
	ReadStepSQL             = readStepSQL
	JobStepsSQL             = jobStepsSQL
	BeginStepsGroupedSQL    = beginStepsGroupedSQL
	CompleteStepsGroupedSQL = completeStepsGroupedSQL
)
