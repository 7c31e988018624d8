package xds

// ResumePlacesHeld is the number of places taken in the server's resume
// gate (resumegate.go), for tests of package xds_test.
func (s *Server) ResumePlacesHeld() int { return len(s.guard.resumes.places) }
