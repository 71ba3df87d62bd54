/** Resolves after ms, or as soon as one of the signals aborts (never rejects). */
export function sleep(ms: number, ...signals: AbortSignal[]): Promise<void> {
  if (signals.some((s) => s.aborted)) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done(): void {
      clearTimeout(timer)
      for (const signal of signals) signal.removeEventListener('abort', done)
      resolve()
    }
    for (const signal of signals) signal.addEventListener('abort', done, { once: true })
  })
}
