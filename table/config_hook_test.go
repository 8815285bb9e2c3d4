package table_test

import (
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

func init() { table.ParseConfigForTests = config.Parse }
