package config

import (
	"fmt"

	"github.com/xdsbridge/xdsbridge/fileout"
)

// Outputs are ways the bridge delivers its resources besides the xDS
// server. Each is off unless its block is given.
type Outputs struct {
	// Filesystem keeps a directory of files for Envoy's path-based config
	// sources (see fileout and the README, "Files for Envoys
	// without a network path").
	Filesystem *fileout.Config `json:"filesystem"`
}

func (o *Outputs) applyDefaults() {
	if o.Filesystem != nil {
		*o.Filesystem = o.Filesystem.WithDefaults()
	}
}

func (o *Outputs) check() error {
	if o.Filesystem != nil {
		if err := o.Filesystem.Check(); err != nil {
			return fmt.Errorf("outputs.filesystem.%w", err)
		}
	}
	return nil
}
