package commands

// keyspaceCommands are the read-only views of the tables for redis-cli
// (KEYS, SCAN, GET, TTL, EXISTS, TYPE, SMEMBERS) and the refusal of writes.
func (s *Server) keyspaceCommands() []*Command { return nil }
