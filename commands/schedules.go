package commands

// scheduleCommands are SCHEDULE.CREATE|GET|LIST|UPDATE|DELETE|PAUSE|RESUME|TRIGGER.
func (s *Server) scheduleCommands() []*Command { return nil }
