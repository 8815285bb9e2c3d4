// Package chunk is a list that grows in fixed-size blocks. Appending never
// copies what is there, so pointers to elements stay valid and a list of
// millions of records grows without the copies and page faults of doubling
// one slice; an element is found with a shift and a mask.
package chunk

const (
	shift = 12
	size  = 1 << shift
)

// List is a list of T; its zero value is empty.
type List[T any] struct {
	blocks [][]T
	n      int
}

// Len is the number of elements.
func (l *List[T]) Len() int { return l.n }

// At returns element i, which must be below Len.
func (l *List[T]) At(i int) *T { return &l.blocks[i>>shift][i&(size-1)] }

// Append adds v and returns its index.
func (l *List[T]) Append(v T) int {
	if l.n>>shift == len(l.blocks) {
		l.blocks = append(l.blocks, make([]T, size))
	}
	i := l.n
	l.blocks[i>>shift][i&(size-1)] = v
	l.n++
	return i
}
