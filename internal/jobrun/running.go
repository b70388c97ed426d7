package jobrun

// Running returns the id of the job running for group (the scaling job,
// when one runs beside a canary's deploy), or "" when none is.
func (m *Manager) Running(group string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.holderLocked(group)
}

// Blocking returns the id of the job a scaling request for group would
// be refused for, "" when none would: the autoscaler holds back its
// decisions for it. A canary in its steps takes one scaling job beside it.
func (m *Manager) Blocking(group string) string {
	g, ok := m.groups.Group(group)
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok && m.takesBesideLocked(g, group) {
		return ""
	}
	return m.holderLocked(group)
}
