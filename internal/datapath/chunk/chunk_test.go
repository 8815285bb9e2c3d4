package chunk

import "testing"

func TestList(t *testing.T) {
	var l List[int]
	var first *int
	for i := 0; i < 3*size+5; i++ {
		if got := l.Append(i * 3); got != i {
			t.Fatalf("Append returned %d, want %d", got, i)
		}
		if i == 0 {
			first = l.At(0)
		}
	}
	if l.Len() != 3*size+5 {
		t.Fatalf("Len %d", l.Len())
	}
	for i := 0; i < l.Len(); i++ {
		if *l.At(i) != i*3 {
			t.Fatalf("At(%d) = %d", i, *l.At(i))
		}
	}
	if first != l.At(0) {
		t.Fatal("growing moved an element")
	}
}
