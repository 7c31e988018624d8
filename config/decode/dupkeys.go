package decode

import (
	"fmt"

	yaml3 "go.yaml.in/yaml/v3"
)

// checkDuplicateKeys reports the first mapping key given twice in a YAML
// or JSON document (JSON is YAML), naming both lines and the key's path.
// encoding/json and the YAML-to-JSON conversion keep the last value
// silently; two `services:` blocks would serve only the second.
// Documents that do not parse are left to the decoder, whose error is
// the one to show.
func checkDuplicateKeys(data []byte) error {
	var root yaml3.Node
	if err := yaml3.Unmarshal(data, &root); err != nil {
		return nil
	}
	return dupWalk(&root, "")
}

func dupWalk(n *yaml3.Node, path string) error {
	switch n.Kind {
	case yaml3.DocumentNode:
		for _, c := range n.Content {
			if err := dupWalk(c, path); err != nil {
				return err
			}
		}
	case yaml3.SequenceNode:
		for i, c := range n.Content {
			if err := dupWalk(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case yaml3.MappingNode:
		seen := map[string]*yaml3.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml3.ScalarNode || k.Tag == "!!merge" {
				continue
			}
			if first, ok := seen[k.Value]; ok {
				where := "key"
				if path != "" {
					where = "key in " + path
				}
				return fmt.Errorf("duplicate %s %q: lines %d and %d (a key may be given once)", where, k.Value, first.Line, k.Line)
			}
			seen[k.Value] = k
			if err := dupWalk(v, join(path, k.Value)); err != nil {
				return err
			}
		}
	}
	return nil
}
