// Runs in every test worker (vitest `setupFiles`). A forks-pool worker notices
// that its runner died (SIGKILL, crash) only when it next reports to it, so a
// test waiting on a service that the watchdog just stopped would keep the
// worker alive until the test timeout. The IPC channel closing says the runner
// is gone: leave at once. Vitest itself stops workers with SIGTERM, never by
// disconnecting, so a normal run never gets here.
const installed = Symbol.for('tidemark.exitWithRunner')
const state = globalThis as { [installed]?: true }
if (state[installed] === undefined && process.send !== undefined) {
  state[installed] = true
  process.once('disconnect', () => process.exit(1))
}
