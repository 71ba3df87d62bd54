/**
 * What the connectors provide, by name: a connector's entry module registers
 * its entries when it is imported, so that src/ never imports a connector.
 *
 * A name the package's own connectors provide can also be loaded on first
 * use, by the connector's public entry point ('tidemark/s3'): an app opens an
 * s3:// URL with no set-up call, and a file-system user never loads the AWS
 * SDK. The entry is imported by its package name (a self-reference, resolved
 * through the `exports` map, or through tsconfig's paths from the sources),
 * never by a path into connectors/.
 */
export class Registry<T> {
  readonly #what: string
  readonly #entries = new Map<string, T>()

  constructor(what: string) {
    this.#what = what
  }

  /** Registers (or replaces: a module loaded twice registers twice) what provides `name`. */
  register(name: string, value: T): void {
    if (typeof name !== 'string' || name === '') throw new TypeError(`${this.#what} name must be a non-empty string, got ${typeof name}`)
    this.#entries.set(name, value)
  }

  get(name: string): T | undefined {
    return this.#entries.get(name)
  }

  /** The entry for name, importing `entry` (a package entry point that registers it) when none is registered yet. Import failures are thrown as they are. */
  async load(name: string, entry: string): Promise<T | undefined> {
    const found = this.#entries.get(name)
    if (found !== undefined) return found
    // A specifier in a variable: TypeScript does not resolve it at build
    // time, when the entry's declarations may not be built yet.
    const specifier: string = entry
    await import(specifier)
    return this.#entries.get(name)
  }
}
