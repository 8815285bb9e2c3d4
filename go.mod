module github.com/director/director

go 1.26.8

require github.com/dchest/siphash v1.2.3

require golang.org/x/sys v0.43.0
