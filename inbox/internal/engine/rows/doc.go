// Package rows is the inbox's rows layout: one table of (consumer,
// idem_key, fingerprint, processed_at) rows with a unique index on
// (consumer, idem_key), retired by Sweep's row deletes. It is the layout
// of releases before issue 14 and of tables made with
// inbox.WithLayout(inbox.LayoutRows), the only one Galera supports, and
// it keeps the catalog checks (Verify) that such a table must pass.
package rows
