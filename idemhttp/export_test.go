package idemhttp

// BufferedBytes exposes the buffered-bytes accounting to tests: the bytes
// held now and the most ever held at once.
func BufferedBytes(m *Middleware) (now, peak int64) {
	return m.budget.used.Load(), m.budget.peak.Load()
}

// RecordRoom exposes the room the next record leaves for a body of unknown
// length.
func RecordRoom(m *Middleware) int { return bodyRoom(m.bodies.Value()) }
