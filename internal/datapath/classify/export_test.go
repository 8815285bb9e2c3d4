package classify

// SetFlowLimit makes c remember at most n flows, as if its memo were full.
func SetFlowLimit(c *Classifier, n int) { c.limit = n }
