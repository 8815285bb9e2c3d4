// Package config reads what operators write: GLB's forwarding-table JSON
// (tables, binds, backends, health checks) and GLB's director.conf with
// director's BGP extension, validated with every problem named by its JSON
// path (tables[1].backends[3].ip: ...); and the files the table tools take,
// a config or a GLB binary told apart by content, size-limited before they
// are read. It fills left-to-the-checks health into a config's JSON for a
// plan to carry. What it reads is table's data model; it builds nothing
// itself but through table.
package config
