import { NotRelayed, RelayClient, type RelayedEntry, type RelayVerdict } from '../append-relay.js'
import type { LockFile } from '../lock-file.js'
import type { FileLogOptions } from './options.js'

/**
 * The connection a core relays its groups over, to the holder of the lock it
 * found when it last did not hold the lock (append-relay.ts).
 */
export class RelaySender {
  readonly #lock: LockFile
  readonly #options: Readonly<Required<FileLogOptions>>
  #client: RelayClient | undefined

  constructor(lock: LockFile, options: Readonly<Required<FileLogOptions>>) {
    this.#lock = lock
    this.#options = options
  }

  /**
   * The holder's verdicts on the entries, or undefined when the core must
   * append them itself (no holder serves relays here, or it refused twice).
   * Any other failure is thrown: the entries' outcome is then in doubt.
   */
  async send(entries: readonly RelayedEntry[], closed: () => boolean): Promise<RelayVerdict[] | undefined> {
    // Twice at most: a core that lost the lock refuses the group, and the
    // holder found then gets it; refused again, this core takes the lock.
    for (let attempt = 0; ; attempt++) {
      let client = this.#client
      if (client === undefined || !client.open) {
        this.#client = undefined
        const holder = await this.#lock.liveHolderHere().catch(() => undefined)
        if (holder === undefined) return undefined
        // Twice the lock's wait: a holder that waits for the lock itself answers with TIDEMARK_LOG_LOCKED before this fires.
        client = await RelayClient.connect(holder.nonce, this.#options, 2 * this.#options.lockTimeoutMs, `pid ${holder.pid}`)
        if (client === undefined) return undefined
        if (closed()) {
          client.close()
          return undefined
        }
        this.#client = client
      }
      try {
        return await client.send(entries)
      } catch (err) {
        if (err instanceof NotRelayed && attempt === 0) continue
        if (err instanceof NotRelayed) return undefined
        throw err
      }
    }
  }

  close(): void {
    this.#client?.close()
  }
}
