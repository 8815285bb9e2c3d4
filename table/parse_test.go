package table

// ParseConfigForTests is table/config's parser, for the tests here that
// start from a config as operators write it. table/config imports this
// package, so the tests here cannot import it; the external test package
// hands it in (config_hook_test.go).
var ParseConfigForTests func([]byte) (*Config, error)

func parseConfig(data []byte) (*Config, error) { return ParseConfigForTests(data) }
