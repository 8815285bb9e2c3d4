package replay

// batch is what one stage of a replay hands the next: a run of items
// (packets, or what the model needs of them) whose capture places count
// from base. The kernel pipeline hands on frames, batch[capture.Packet];
// the model's reader hands each worker the flows it owns, batch[item].
type batch[T any] struct {
	base  int
	items []T
}
