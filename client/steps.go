package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Step runs fn as the job's durable step id. When the step completed in an
// earlier delivery with an equal input, its kept output is decoded into T
// and fn does not run; otherwise fn runs and its output is kept: agq has
// it once the job's next step begins or the job is reported, and at most
// 50 ms after Step returned whatever the handler does meanwhile. When fn
// fails, the step fails and with it this delivery: agq retries the job
// (its completed steps kept) or, for a Permanent error or a step out of
// attempts, fails it; the handler returns Step's error as it is.
func Step[T any](ctx context.Context, j *Job, id string, input any, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	begin := map[string]any{"input": input}
	body, err := json.Marshal(begin)
	if err != nil {
		return zero, fmt.Errorf("client: step %s: input is not JSON: %w", id, err)
	}
	raw, err := j.beginStep(ctx, id, string(body))
	if err != nil {
		return zero, err
	}
	var reply struct {
		Execute bool            `json:"execute"`
		Attempt int             `json:"attempt"`
		Output  json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal([]byte(raw), &reply); err != nil {
		return zero, fmt.Errorf("client: STEP.BEGIN %s answered %q: %w", id, raw, err)
	}
	if !reply.Execute {
		var out T
		if err := json.Unmarshal(reply.Output, &out); err != nil {
			return zero, Permanent(fmt.Errorf("client: step %s: decoding its kept output: %w", id, err))
		}
		return out, nil
	}

	out, ferr := runStep(ctx, fn)
	if ferr != nil {
		doc, _ := json.Marshal(map[string]any{"message": ferr.Error(), "non_retryable": IsPermanent(ferr)})
		// Recorded even when ctx ended (a timeout, a shutdown): the
		// failure then counts against the step, not the job.
		err := j.flushHeld()
		if err == nil {
			fctx, cancel := detached(ctx)
			_, err = j.stepCommand(fctx, "STEP.FAIL", id, string(doc))
			cancel()
		}
		if err != nil {
			return zero, fmt.Errorf("client: step %s failed (%v), and agq did not record it: %w", id, ferr, err)
		}
		j.endDelivery()
		return zero, fmt.Errorf("%w: %s: %w", ErrStepFailed, id, ferr)
	}
	output, err := json.Marshal(out)
	if err != nil {
		return zero, Permanent(fmt.Errorf("client: step %s: output is not JSON: %w", id, err))
	}
	// Work done is kept even when ctx ended meanwhile: with the next
	// step's begin, the final report or soon after (stepsheld.go).
	if err := j.holdCompletion(id, string(output)); err != nil {
		return zero, err
	}
	return out, nil
}

func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// runStep runs fn, turning a panic into its error so that the step, not
// the job, records the failure.
func runStep[T any](ctx context.Context, fn func(context.Context) (T, error)) (out T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn(ctx)
}

// Sleep is a durable timer named id. The first call puts the job to sleep
// for d and returns an error wrapping ErrSleeping, which the handler
// returns: agq delivers the job again at the wake time, when the same call
// returns nil at once.
func (j *Job) Sleep(ctx context.Context, id string, d time.Duration) error {
	secs := strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', -1, 64)
	if err := j.flushHeld(); err != nil {
		return err
	}
	reply, err := j.stepCommand(ctx, "STEP.SLEEP", id, secs)
	if err != nil {
		return err
	}
	if wake, ok := strings.CutPrefix(reply, "SLEEPING "); ok {
		j.endDelivery()
		return fmt.Errorf("%w until %s", ErrSleeping, wake)
	}
	return nil
}

// endDelivery records that agq ended this delivery (a failed step, a
// sleep): the job is reported no more.
func (j *Job) endDelivery() {
	j.run.mu.Lock()
	j.run.ended = true
	j.run.mu.Unlock()
}

// stepCommand sends a STEP.* command about this delivery, retrying
// connection trouble (agq answers a repeated call as the first).
func (j *Job) stepCommand(ctx context.Context, name, stepID string, args ...any) (string, error) {
	w := j.w
	b := w.newBackoff()
	cmd := append([]any{name, j.ID(), stepID}, args...)
	cmd = append(cmd, "DELIVERY", j.msg.Delivery)
	for {
		reply, err := w.stepCall(ctx, cmd)
		switch classify(err) {
		case outcomeOK:
			return reply, nil
		case outcomeCancelled:
			j.run.cancel(errCancelConfirmed)
			return "", fmt.Errorf("%w: %v", ErrCancelled, err)
		case outcomeLost:
			lost := fmt.Errorf("%w: %v", ErrDeliveryLost, err)
			j.run.cancel(lost)
			return "", lost
		case outcomeNotRegistered:
			w.reg.lost()
			if err := w.ensureRegistered(ctx); err != nil {
				return "", err
			}
		case outcomeConn:
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return "", err
			}
			w.reg.lost()
		default:
			return "", fmt.Errorf("client: %s %s: %w", name, stepID, err)
		}
		if ctx.Err() != nil {
			return "", err
		}
		wait := b.Next()
		w.log.Warn(name+" failed", "job_id", j.ID(), "step_id", stepID, "error", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return "", err
		}
	}
}
