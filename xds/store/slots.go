package store

// slots numbers a type's resources densely, from 0: a slot is taken by a
// new name and freed by its deletion, and a freed slot goes to a later new
// name, so that the slots stay below the most resources the type ever
// held at once. A set of a type's resources is then a bitset (the request
// decoder's record of what a reconnecting client holds current).
type slots struct {
	next  int32   // slots ever taken: every slot is below
	freed []int32 // to be taken again
}

func (s *slots) take() int32 {
	if n := len(s.freed); n > 0 {
		v := s.freed[n-1]
		s.freed = s.freed[:n-1]
		return v
	}
	s.next++
	return s.next - 1
}

func (s *slots) free(v int32) { s.freed = append(s.freed, v) }
