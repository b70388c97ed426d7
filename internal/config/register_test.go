package config_test

// The provider types register from their packages, which import config:
// this external test file links them into the package's tests.
import _ "github.com/shoal-lb/shoal/internal/provider/all"
