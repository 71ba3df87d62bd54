// Configuration properties (string keys, string values) shared by a group of
// processes, on a SharedMap: the SharedConfig of Pravega's sample.
import { SharedMap, type SharedMapOptions } from './shared-map.js'

export class SharedConfig {
  readonly #map: SharedMap<string>

  private constructor(map: SharedMap<string>) {
    this.#map = map
  }

  static async open(options: SharedMapOptions): Promise<SharedConfig> {
    return new SharedConfig(await SharedMap.open<string>(options))
  }

  get revision(): bigint {
    return this.#map.revision
  }

  /** The local copy, sorted by key; it may be stale until synchronize(). */
  getProperties(): Map<string, string> {
    return new Map([...this.#map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
  }

  getProperty(key: string): string | undefined {
    return this.#map.get(key)
  }

  /** Returns the previous value. */
  putProperty(key: string, value: string): Promise<string | undefined> {
    return this.#map.put(key, value)
  }

  /** Returns the value the key already had, if it had one (and then nothing changed). */
  putPropertyIfAbsent(key: string, value: string): Promise<string | undefined> {
    return this.#map.putIfAbsent(key, value)
  }

  /** Returns the removed value; with `currentValue`, removes only while the property has it. */
  removeProperty(key: string, ...currentValue: [] | [string]): Promise<string | undefined> {
    return this.#map.remove(key, ...currentValue)
  }

  /** Returns the replaced value; with `currentValue`, replaces only while the property has it. */
  async replaceProperty(key: string, newValue: string, ...currentValue: [] | [string]): Promise<string | undefined> {
    return (await this.#map.replace(key, newValue, ...currentValue))?.replaced
  }

  clear(): Promise<void> {
    return this.#map.clear()
  }

  synchronize(): Promise<void> {
    return this.#map.refresh()
  }

  close(): Promise<void> {
    return this.#map.close()
  }
}
