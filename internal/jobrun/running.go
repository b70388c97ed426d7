package jobrun

// Running returns the id of the job running for group, or "" when none is:
// the autoscaler explains a held-back decision with it.
func (m *Manager) Running(group string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running[group]
}
