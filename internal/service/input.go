package service

import (
	"fmt"

	"github.com/director/director/internal/change"
	"github.com/director/director/loader"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// input is a config (and director config) the service may serve.
type input struct {
	dcData []byte
	src    *change.Input         // the config, read through the pipeline's one way in
	dc     *table.DirectorConfig // nil: keep the live one
	tables *change.Builders      // one per table, kept for incremental rebuilds
	judged []table.TableConfig   // the tables as last built, health judged
	views  map[string]checkView  // the checks as judged was built from them
}

// newInput is the input of a config read for the datapath.
func newInput(src *change.Input) *input {
	return &input{src: src, tables: change.NewBuilders(src.Config)}
}

// cfg is the config in holds.
func (in *input) cfg() *table.Config { return in.src.Config }

// read reads the config files, as at start.
func (s *service) read() (*input, error) {
	s.files.cfg = newWatched(s.o.Config, int64(config.MaxJSONBytes(mapimage.Limit)), "a JSON config")
	if s.o.DirectorConfig != "" {
		s.files.dc = newWatched(s.o.DirectorConfig, config.MaxDirectorConfigBytes, "a director config")
	}
	if _, err := s.look(true); err != nil {
		return nil, err
	}
	return s.parse()
}

// look looks at the config files, reading a version not seen yet (force:
// reading them whatever stat says). It reports whether either is a new
// version, and why one cannot be used.
func (s *service) look(force bool) (bool, error) {
	changed := s.files.cfg.look(force)
	if s.files.dc != nil && s.files.dc.look(force) {
		changed = true
	}
	if s.files.cfg.err != nil {
		return changed, s.files.cfg.err
	}
	if s.files.dc != nil && s.files.dc.err != nil {
		return changed, s.files.dc.err
	}
	return changed, nil
}

// version names the config files' versions last looked at.
func (s *service) version() string {
	v := s.files.cfg.version()
	if s.files.dc != nil {
		v += " " + s.files.dc.version()
	}
	return v
}

// parse parses the config files' contents as last read.
func (s *service) parse() (*input, error) {
	data := s.files.cfg.data
	if table.IsGLBBinary(data) {
		return nil, fmt.Errorf("%s is a GLB binary table: director run reads the JSON config (forwarding_table.src.json), whose backends it checks", s.o.Config)
	}
	src, err := change.Read(s.o.Config, data)
	if err != nil {
		return nil, err
	}
	for _, w := range src.Config.Warnings {
		s.log.Warn("config", "file", s.o.Config, "warning", w)
	}
	in := newInput(src)
	if s.files.dc != nil {
		in.dcData = s.files.dc.data
		dc, err := config.ParseDirector(in.dcData)
		if err != nil {
			return nil, config.InFile(s.o.DirectorConfig, err)
		}
		for _, w := range dc.Warnings {
			s.log.Warn("director config", "file", s.o.DirectorConfig, "warning", w)
		}
		if in.dc, err = loader.ResolveGateway(dc); err != nil {
			return nil, config.InFile(s.o.DirectorConfig, err)
		}
		if srcs, err := loader.Sources(in.dc); err == nil {
			for _, src := range srcs {
				if src.Iface == "" {
					s.log.Warn("director config", "file", s.o.DirectorConfig, "warning", src.NotHere())
				}
			}
		}
	}
	return in, nil
}

// readIfChanged looks at the config files and parses them when either is
// a new version whose contents differ from what is served or pending. It
// returns the input (nil when nothing is to change), whether a new version
// was looked at, and why it cannot be used.
func (s *service) readIfChanged(force bool) (*input, bool, error) {
	changed, err := s.look(force)
	if !changed || err != nil {
		return nil, changed, err
	}
	last := s.cur
	if s.pending != nil {
		last = s.pending
	}
	if string(s.files.cfg.data) == string(last.src.Data) && (s.files.dc == nil || string(s.files.dc.data) == string(last.dcData)) {
		return nil, true, nil
	}
	in, err := s.parse()
	return in, true, err
}
