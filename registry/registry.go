// Package registry holds the rules for workers: what a registration must
// contain and which capabilities a worker offers.
package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
)

// ValidWorkerID reports whether id is 1-64 letters, digits, '_' or '-'.
func ValidWorkerID(id string) bool { return names.Worker(id) }

// Registration is the WORKER.REGISTER document.
type Registration struct {
	WorkerID          string            `json:"worker_id"`
	Hostname          string            `json:"hostname"`
	Platform          string            `json:"platform"`
	AgwVersion        string            `json:"agw_version"`
	Capabilities      json.RawMessage   `json:"capabilities"`
	MaxConcurrentJobs *int              `json:"max_concurrent_jobs"`
	Tags              map[string]string `json:"tags"`
	// RunningJobs, when given, are the jobs the worker really runs: held
	// jobs it acknowledged but does not list were lost with an earlier
	// process of the same id, and go back to their queues.
	RunningJobs *[]string `json:"running_jobs"`
}

type capabilities struct {
	Tools        []string `json:"tools"`
	AgenticUnits []string `json:"agentic_units"`
	Types        []string `json:"types"`
}

// ParseRegistration validates a registration and returns the worker record
// to store (principal left for the caller) and the jobs it says it runs:
// nil when it does not say.
func ParseRegistration(raw []byte) (records.Worker, []string, error) {
	var reg Registration
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&reg); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "worker_id" {
			return records.Worker{}, nil, records.ErrInvalidWorkerID
		}
		return records.Worker{}, nil, &records.InvalidRegistrationError{Reason: jsonmsg.Reason(err)}
	}
	if dec.More() {
		return records.Worker{}, nil, &records.InvalidRegistrationError{Reason: "trailing data after the JSON object"}
	}
	if !ValidWorkerID(reg.WorkerID) {
		return records.Worker{}, nil, records.ErrInvalidWorkerID
	}
	if strings.TrimSpace(reg.Hostname) == "" {
		return records.Worker{}, nil, &records.InvalidRegistrationError{Reason: "hostname is required"}
	}
	if strings.TrimSpace(reg.AgwVersion) == "" {
		return records.Worker{}, nil, &records.InvalidRegistrationError{Reason: "agw_version is required"}
	}
	caps, err := parseCapabilities(reg.Capabilities)
	if err != nil {
		return records.Worker{}, nil, err
	}
	maxJobs := 1
	if reg.MaxConcurrentJobs != nil {
		if *reg.MaxConcurrentJobs < 1 || *reg.MaxConcurrentJobs > 100000 {
			return records.Worker{}, nil, &records.InvalidRegistrationError{Reason: "max_concurrent_jobs must be between 1 and 100000"}
		}
		maxJobs = *reg.MaxConcurrentJobs
	}
	var running []string
	if reg.RunningJobs != nil {
		running = append([]string{}, *reg.RunningJobs...)
	}
	return records.Worker{
		ID:                reg.WorkerID,
		Hostname:          reg.Hostname,
		Platform:          reg.Platform,
		AgwVersion:        reg.AgwVersion,
		Capabilities:      caps,
		Metadata:          json.RawMessage(raw),
		MaxConcurrentJobs: maxJobs,
	}, running, nil
}

// parseCapabilities requires {"tools":[…]} with optional agentic_units and
// types, all arrays of non-empty strings, and returns their sorted union.
func parseCapabilities(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, records.ErrInvalidCapabilities
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, records.ErrInvalidCapabilities
	}
	if t, ok := probe["tools"]; !ok || string(t) == "null" {
		return nil, records.ErrInvalidCapabilities
	}
	var c capabilities
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, records.ErrInvalidCapabilities
	}
	all := []string{}
	for _, list := range [][]string{c.Tools, c.AgenticUnits, c.Types} {
		for _, name := range list {
			if name == "" || len(name) > 128 {
				return nil, records.ErrInvalidCapabilities
			}
			all = append(all, name)
		}
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}
