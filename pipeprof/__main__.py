from pipeprof.cli.main import entry

entry()
