/**
 * Runs fn over items with at most `limit` calls in flight. After the first
 * failure no new call starts; the ones running are awaited (so no work is
 * left behind) and the first error is thrown.
 */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  let failure: { error: unknown } | undefined
  const worker = async (): Promise<void> => {
    while (failure === undefined && next < items.length) {
      const i = next++
      try {
        results[i] = await fn(items[i]!, i)
      } catch (error) {
        failure ??= { error }
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
  if (failure !== undefined) throw failure.error
  return results
}
