package config

// Outputs are ways the bridge delivers its resources besides the xDS
// server. Each is off unless its block is given.
type Outputs struct {
	// Filesystem keeps a directory of files for Envoy's path-based config
	// sources (see the fileout package and the README, "Files for Envoys
	// without a network path").
	Filesystem *Filesystem `json:"filesystem"`
}
