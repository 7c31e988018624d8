package xds

// ResumePlacesHeld is the number of places taken in the resume gate
// (resumegate.go), for tests of package xds_test.
func ResumePlacesHeld() int { return len(resumes.places) }
