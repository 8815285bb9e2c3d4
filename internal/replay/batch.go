package replay

// batch is what one stage of the model's replay hands the next: a run of
// items whose capture places count from base; the reader hands each
// worker the flows it owns, batch[item].
type batch[T any] struct {
	base  int
	items []T
}
