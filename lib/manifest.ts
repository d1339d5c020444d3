import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

export interface Manifest {
  name: string
  version: string
  license: string
}

/**
 * The project's package.json, found upwards from this module: the same file whether the
 * service runs from its sources or from dist/ (the OpenAPI document, the build-info metric and
 * the spans' service.version all name its version).
 */
export function readManifest (): Manifest {
  let directory = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(directory, 'package.json'))) {
    const parent = dirname(directory)
    if (parent === directory) throw new Error('package.json not found above the service\'s modules')
    directory = parent
  }
  const manifest = JSON.parse(readFileSync(join(directory, 'package.json'), 'utf8')) as Partial<Manifest>
  if (typeof manifest.name !== 'string' || typeof manifest.version !== 'string' || typeof manifest.license !== 'string') {
    throw new Error('package.json needs a name, a version and a license (an SPDX id) for the OpenAPI document')
  }
  return { name: manifest.name, version: manifest.version, license: manifest.license }
}
