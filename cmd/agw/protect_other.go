//go:build !linux

package main

// protectSecrets does nothing outside Linux.
func protectSecrets() error { return nil }
